package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/netproxy"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

// Detach scenario settings.
const (
	detachShards = 16
	// detachWithin bounds the waits for the handler's cancellation and for
	// the lease's expiry after the partition: both are due within a TTL.
	detachWithin = 4 * LeaseTTL
	// ownWithin bounds the wait for the runner to own its shards.
	ownWithin = 30 * time.Second
	// ttlPollInterval is how often the bench asks etcd for the lease's
	// remaining time after the partition: the resolution of the expiry.
	ttlPollInterval = 10 * time.Millisecond
	// etcdCallTimeout bounds each of the bench's own etcd calls.
	etcdCallTimeout = 2 * time.Second
	// typeBlock is the task type of detach: its handler runs until its
	// context is cancelled and reports when that happened.
	typeBlock = "bench-block"
)

// DetachResult holds the figures of detach, measured from outside the
// runner on the bench's clock: per trial, the margin the runner actually
// kept — the lease's expiry in etcd minus the moment its task handler saw
// its context cancelled. Guarantee 2 (detach before expiry) requires it to be positive; the
// runner aims for about its detach margin.
type DetachResult struct {
	LeaseTTLMS float64 `json:"lease_ttl_ms"`
	// DetachMarginMS is the configured detach margin (lease_ttl/3).
	DetachMarginMS float64       `json:"detach_margin_ms"`
	Shards         int           `json:"shards"`
	MinMarginMS    float64       `json:"min_margin_ms"`
	MedianMarginMS float64       `json:"median_margin_ms"`
	Trials         []DetachTrial `json:"trials"`
}

// DetachTrial is one partition. Times are the bench's; the expiry is a
// lower bound from etcd's own count of the lease's remaining time, so the
// margin errs low.
type DetachTrial struct {
	// MarginMS is lease expiry − handler cancellation: the margin kept.
	MarginMS float64 `json:"margin_ms"`
	// KeyDeletedMS is the runner key's deletion, as the bench's watch saw
	// it, − handler cancellation. etcd revokes expired leases in a pass
	// every 500ms, so this is later than the expiry by up to that much
	// plus one watch delivery.
	KeyDeletedMS float64 `json:"key_deleted_ms"`
	// AfterPartitionMS is handler cancellation − partition.
	AfterPartitionMS float64 `json:"after_partition_ms"`
	// ExpiryAfterPartitionMS is lease expiry − partition.
	ExpiryAfterPartitionMS float64 `json:"expiry_after_partition_ms"`
	// Reason is the detachment reason the runner counted
	// (tenure_sharding_detachments_total): a label, not a measurement.
	Reason string `json:"reason"`
}

// runDetach partitions a runner.Runner from etcd once per trial, each in
// a cluster of its own.
func runDetach(ctx context.Context, e *env) (Result, error) {
	res := &DetachResult{LeaseTTLMS: ms(LeaseTTL), Shards: detachShards}
	var margins []float64
	for i := range e.trials {
		tr, margin, err := detachTrial(ctx, e, i+1)
		if err != nil {
			return nil, fmt.Errorf("bench: detach trial %d: %w", i+1, err)
		}
		res.DetachMarginMS = ms(margin)
		res.Trials = append(res.Trials, tr)
		margins = append(margins, tr.MarginMS)
		e.logf("detach: trial %d/%d: handler cancelled %.0fms after the partition (%s), %.1fms before the lease expired (runner key deleted %.1fms after the cancellation)",
			i+1, e.trials, tr.AfterPartitionMS, tr.Reason, tr.MarginMS, tr.KeyDeletedMS)
	}
	res.MinMarginMS, res.MedianMarginMS = minOf(margins), round(median(margins), 3)
	return res, nil
}

// detachTrial runs one runner whose etcd connection goes through a TCP
// proxy, with one task whose handler blocks until cancelled; at a random
// point of the keep-alive cycle the proxy blackholes (a partition). The
// handler stamps its cancellation; the bench's own etcd client (not
// through the proxy) follows the runner's lease — its remaining time and
// the runner key's deletion — until it expires.
func detachTrial(ctx context.Context, e *env, n int) (DetachTrial, time.Duration, error) {
	c, err := e.newCluster(ctx, ScenarioDetach, detachShards)
	if err != nil {
		return DetachTrial{}, 0, err
	}
	id := fmt.Sprintf("detach-%d", n)
	u, err := url.Parse(c.Etcd)
	if err != nil {
		return DetachTrial{}, 0, fmt.Errorf("etcd endpoint %q: %w", c.Etcd, err)
	}
	proxy, err := netproxy.New(u.Host)
	if err != nil {
		return DetachTrial{}, 0, err
	}
	defer proxy.Close()
	cfg, err := c.config(id)
	if err != nil {
		return DetachTrial{}, 0, err
	}
	started, cancelled := make(chan struct{}, 1), make(chan time.Time, 1)
	block := func(h *entity.Host) error {
		return h.RegisterFunc(typeBlock, func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done()
			at := time.Now() // the moment the handler sees it
			select {
			case cancelled <- at:
			default:
			}
			return nil, context.Cause(ctx)
		})
	}
	x, err := c.startRunner(id, block, "etcd.endpoints=http://"+proxy.Addr())
	if err != nil {
		return DetachTrial{}, 0, err
	}
	defer func() {
		proxy.SetMode(netproxy.Pass) // let it re-register and drain
		x.stop()
	}()
	ownsAll := func(h map[storage.ShardID]string) bool {
		n := 0
		for _, holder := range h {
			if holder == id {
				n++
			}
		}
		return n == c.Meta.Shards
	}
	if _, err := c.locks.Await(ctx, fmt.Sprintf("runner %s to own all %d shards", id, c.Meta.Shards), ownWithin, ownsAll); err != nil {
		if ferr := x.failed(); ferr != nil {
			return DetachTrial{}, 0, ferr
		}
		return DetachTrial{}, 0, err
	}

	// The runner's lease, from its key, read by the bench directly.
	cli := c.etcd.Client()
	key := runner.EtcdPrefix(c.Name) + "runners/" + id
	gctx, cancel := context.WithTimeout(ctx, etcdCallTimeout)
	resp, err := cli.Get(gctx, key)
	cancel()
	if err != nil {
		return DetachTrial{}, 0, fmt.Errorf("reading %s: %w", key, err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		return DetachTrial{}, 0, fmt.Errorf("runner key %s: not registered under a lease", key)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	// The watch and the lease polling end with the trial, whatever ends it.
	var wg sync.WaitGroup
	defer wg.Wait()
	trialCtx, endTrial := context.WithCancel(ctx)
	defer endTrial()
	watchCtx, stopWatch := context.WithCancel(trialCtx)
	defer stopWatch()
	deleted := make(chan time.Time, 1)
	watch := cli.Watch(clientv3.WithRequireLeader(watchCtx), key, clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterPut())
	wg.Add(1)
	go func() {
		defer wg.Done()
		for wr := range watch {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					deleted <- time.Now()
					stopWatch()
					return
				}
			}
		}
	}()

	// One task, running when the partition comes.
	tc, err := c.client(ctx)
	if err != nil {
		return DetachTrial{}, 0, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, _, err = tc.Submit(sctx, task.SubmitRequest{Type: typeBlock})
	cancel()
	if err != nil {
		return DetachTrial{}, 0, fmt.Errorf("submit: %w", err)
	}
	select {
	case <-started:
	case <-time.After(startWithin):
		return DetachTrial{}, 0, fmt.Errorf("the task did not start on %s within %s (log %s)", id, startWithin, x.logPath)
	case <-ctx.Done():
		return DetachTrial{}, 0, ctx.Err()
	}
	// Cut at a random point of the keep-alive cycle, so that the trials
	// sample its phases evenly.
	select {
	case <-time.After(rand.N(cfg.Lease.KeepAliveInterval.Std())):
	case <-ctx.Done():
		return DetachTrial{}, 0, ctx.Err()
	}
	detachesBefore, err := counters([]*prometheus.Registry{x.reg}, "tenure_sharding_detachments_total", "reason", nil)
	if err != nil {
		return DetachTrial{}, 0, err
	}
	partition := time.Now()
	proxy.SetMode(netproxy.Blackhole)
	expiry := followLease(trialCtx, cli, lease, &wg)

	var tr DetachTrial
	var cancelAt, deletedAt time.Time
	select {
	case cancelAt = <-cancelled:
	case <-time.After(detachWithin):
		return DetachTrial{}, 0, fmt.Errorf("the handler on %s was still running %s after its partition from etcd (log %s)", id, detachWithin, x.logPath)
	case <-ctx.Done():
		return DetachTrial{}, 0, ctx.Err()
	}
	select {
	case deletedAt = <-deleted:
	case <-time.After(detachWithin):
		return DetachTrial{}, 0, fmt.Errorf("the runner key %s was still there %s after the partition", key, detachWithin)
	case <-ctx.Done():
		return DetachTrial{}, 0, ctx.Err()
	}
	exp, err := expiry()
	if err != nil {
		return DetachTrial{}, 0, err
	}
	tr.MarginMS = ms(exp.Sub(cancelAt))
	tr.KeyDeletedMS = ms(deletedAt.Sub(cancelAt))
	tr.AfterPartitionMS = ms(cancelAt.Sub(partition))
	tr.ExpiryAfterPartitionMS = ms(exp.Sub(partition))
	detaches, err := counters([]*prometheus.Registry{x.reg}, "tenure_sharding_detachments_total", "reason", nil)
	if err != nil {
		return DetachTrial{}, 0, err
	}
	for reason, v := range detaches {
		if v > detachesBefore[reason] {
			tr.Reason = reason
		}
	}
	if tr.MarginMS <= 0 || tr.KeyDeletedMS <= 0 {
		return tr, 0, fmt.Errorf("the handler on %s was cancelled too late: lease expiry − cancellation = %.1fms, runner key deletion − cancellation = %.1fms; both must be positive (log %s)",
			id, tr.MarginMS, tr.KeyDeletedMS, x.logPath)
	}
	return tr, cfg.Detachment.Margin.Std(), nil
}

// followLease polls etcd for lease's remaining time every ttlPollInterval
// until it is gone or ctx ends, and returns a function that stops the
// polling and returns the expiry. etcd answers the remaining time in
// whole seconds, truncated: an answer of k ≥ 1 means the lease expires at
// least k seconds after the request was sent, so the expiry is at least
// the latest such bound (exact to a poll interval once the last second
// runs). Keep-alives only move the expiry later, so bounds taken before
// the last one stay valid.
func followLease(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID, wg *sync.WaitGroup) func() (time.Time, error) {
	pctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	var bound time.Time
	var samples int
	var lastErr error
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		tick := time.NewTicker(ttlPollInterval)
		defer tick.Stop()
		for {
			sent := time.Now()
			cctx, cancel := context.WithTimeout(pctx, etcdCallTimeout)
			resp, err := cli.TimeToLive(cctx, lease)
			cancel()
			mu.Lock()
			switch {
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
				mu.Unlock()
				return
			case err != nil:
				lastErr = err
			case resp.TTL >= 1:
				samples++
				if b := sent.Add(time.Duration(resp.TTL) * time.Second); b.After(bound) {
					bound = b
				}
			case resp.TTL == -1: // gone
				mu.Unlock()
				return
			}
			mu.Unlock()
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() (time.Time, error) {
		stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if samples == 0 {
			err := errors.New("no answer with a remaining time")
			if lastErr != nil {
				err = lastErr
			}
			return time.Time{}, fmt.Errorf("following lease %x: %w", int64(lease), err)
		}
		return bound, nil
	}
}
