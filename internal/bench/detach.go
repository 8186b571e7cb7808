package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/internal/netproxy"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// Detach scenario settings.
const (
	detachShards = 16
	// detachWithin bounds the wait for the detachment after the partition:
	// it is due within a TTL.
	detachWithin = 4 * LeaseTTL
	// ownWithin bounds the wait for the runner to own its shards.
	ownWithin = 30 * time.Second
)

// DetachResult holds the figures of detach: per trial, when a runner cut
// off from etcd detached, relative to its cutoff (lease deadline − detach
// margin, from the detachment transition itself). Negative: before the
// cutoff, as the design requires.
type DetachResult struct {
	LeaseTTLMS float64       `json:"lease_ttl_ms"`
	MarginMS   float64       `json:"margin_ms"`
	Shards     int           `json:"shards"`
	MedianMS   float64       `json:"median_ms"`
	MaxMS      float64       `json:"max_ms"`
	Trials     []DetachTrial `json:"trials"`
}

// DetachTrial is one partition.
type DetachTrial struct {
	MS               float64 `json:"ms"`                 // detach time − (deadline − margin)
	AfterPartitionMS float64 `json:"after_partition_ms"` // detach time − partition time
	Reason           string  `json:"reason"`
}

// runDetach partitions a runner's etcd connection per trial. The runner
// is the sharding manager a runner.Runner runs (same config, same etcd
// store options), built directly so that its detachment machine can be
// subscribed to: runner.Runner does not expose it.
func runDetach(ctx context.Context, e *env) (Result, error) {
	c, err := e.newCluster(ctx, ScenarioDetach, detachShards)
	if err != nil {
		return nil, err
	}
	cfg, err := c.config("detach")
	if err != nil {
		return nil, err
	}
	sc := cfg.ShardingConfig()
	res := &DetachResult{LeaseTTLMS: ms(sc.LeaseTTL), MarginMS: ms(sc.Detachment.DetachMargin), Shards: detachShards}
	var xs []float64
	for i := range e.trials {
		tr, err := detachTrial(ctx, c, fmt.Sprintf("detach-%d", i+1), cfg)
		if err != nil {
			return nil, fmt.Errorf("bench: detach trial %d: %w", i+1, err)
		}
		res.Trials = append(res.Trials, tr)
		xs = append(xs, tr.MS)
		e.logf("detach: trial %d/%d: detached (%s) %.1fms from the cutoff, %.0fms after the partition", i+1, e.trials, tr.Reason, tr.MS, tr.AfterPartitionMS)
	}
	res.MedianMS, res.MaxMS = round(median(xs), 3), maxOf(xs)
	return res, nil
}

func detachTrial(ctx context.Context, c *cluster, id string, cfg runner.Config) (DetachTrial, error) {
	sc := cfg.ShardingConfig()
	u, err := url.Parse(c.infra.EtcdEndpoint)
	if err != nil {
		return DetachTrial{}, fmt.Errorf("etcd endpoint %q: %w", c.infra.EtcdEndpoint, err)
	}
	proxy, err := netproxy.New(u.Host)
	if err != nil {
		return DetachTrial{}, err
	}
	defer proxy.Close()
	store, err := etcd.Dial(ctx, etcd.DialConfig{Endpoints: []string{"http://" + proxy.Addr()}, DialTimeout: cfg.Etcd.DialTimeout.Std()},
		etcd.WithPrefix(runner.EtcdPrefix(cfg.Cluster)), etcd.WithRequestTimeout(cfg.Etcd.RequestTimeout.Std()),
		etcd.WithKeepAliveInterval(sc.KeepAliveInterval), etcd.WithKeepAliveTimeout(sc.KeepAliveTimeout))
	if err != nil {
		return DetachTrial{}, err
	}
	defer store.Close()
	self := storage.RunnerInfo{ID: id, Weight: 1, Version: runner.Version, StartedAt: time.Now().UTC()}
	mgr, err := sharding.New(store, self, c.meta(), sc)
	if err != nil {
		return DetachTrial{}, err
	}
	detached := make(chan detachment.Transition, 1)
	unsubscribe := mgr.Machine().Subscribe(func(t detachment.Transition) {
		if t.Kind == detachment.Detached {
			select {
			case detached <- t:
			default:
			}
		}
	})
	defer unsubscribe()
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Run(runCtx) }()
	defer func() {
		proxy.SetMode(netproxy.Pass) // let it revoke its lease
		stop()
		select {
		case <-done:
		case <-time.After(stopTimeout):
		}
	}()
	// Own every shard first, as a working runner would.
	deadline := time.Now().Add(ownWithin)
	for len(mgr.Owned()) < c.shards {
		if time.Now().After(deadline) {
			return DetachTrial{}, fmt.Errorf("runner %s owns %d of %d shards after %s", id, len(mgr.Owned()), c.shards, ownWithin)
		}
		select {
		case err := <-done:
			return DetachTrial{}, fmt.Errorf("runner %s stopped before owning its shards: %v", id, err)
		case <-ctx.Done():
			return DetachTrial{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	// Cut at a random point of the keep-alive cycle, so that the trials
	// sample its phases evenly.
	phase := rand.N(sc.KeepAliveInterval)
	select {
	case <-time.After(phase):
	case <-ctx.Done():
		return DetachTrial{}, ctx.Err()
	}
	// Drain transitions from the start-up, if any.
	select {
	case <-detached:
	default:
	}
	partition := time.Now()
	proxy.SetMode(netproxy.Blackhole)
	select {
	case t := <-detached:
		cutoff := t.Deadline.Add(-sc.Detachment.DetachMargin)
		return DetachTrial{MS: ms(t.At.Sub(cutoff)), AfterPartitionMS: ms(t.At.Sub(partition)), Reason: string(t.Reason)}, nil
	case <-time.After(detachWithin):
		return DetachTrial{}, fmt.Errorf("runner %s still attached %s after its partition from etcd", id, detachWithin)
	case <-ctx.Done():
		return DetachTrial{}, ctx.Err()
	}
}
