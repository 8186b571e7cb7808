package bench

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
	s3store "github.com/tenurehq/tenure/storage/s3"
	"github.com/tenurehq/tenure/storage/s3coord"
)

// convergeTimeout bounds the wait for a cluster's shards to be locked as
// the assignment says.
const convergeTimeout = 60 * time.Second

// cluster is one scenario's cluster (see package harness): a fresh name
// (so fresh etcd and S3 prefixes), the settings every runner of it shares,
// and the bench's own view of its coordination store: a store and the
// timeline of its shard locks.
type cluster struct {
	*harness.Cluster
	env       *env
	overrides []string // runner config keys, as key=value
	// store is the bench's own coordination store: on etcd, etcd (also
	// in etcd); on S3, an S3 store on the bench's own S3 connection,
	// straight to the server, so that its polling is never counted as
	// the runners' requests (those go through the runners' own
	// connections, and a counting proxy where a scenario counts them).
	store storage.RunnerStore
	etcd  *etcd.Store // nil on S3
	// s3Poll is the interval of the S3 store's polls (on S3).
	s3Poll time.Duration
	locks  *harness.LockTimeline
}

// Cleanup has f run when the run ends: the harness closes a cluster's
// stores and proxies through it.
func (e *env) Cleanup(f func()) { e.onClose(f) }

// newCluster creates a cluster of shards shards, with the bench's lease
// TTL and the product's other defaults, and the run's S3 latency if any,
// and starts watching its locks.
func (e *env) newCluster(ctx context.Context, scenario string, shards int) (*cluster, error) {
	return e.newClusterWith(ctx, scenario, shards, e.o.S3Latency)
}

// newClusterWith is newCluster with the S3 latency lat (nil: none) on the
// S3 connections of its runners and clients.
func (e *env) newClusterWith(ctx context.Context, scenario string, shards int, lat *S3Latency) (*cluster, error) {
	in, err := e.servers(ctx)
	if err != nil {
		return nil, err
	}
	direct := in.S3Endpoint // the bench's own store skips the simulated latency
	if in.S3Endpoint, err = e.s3Endpoint(in, lat); err != nil {
		return nil, err
	}
	name := e.clusterName(scenario)
	c := &cluster{env: e, Cluster: harness.New(e, harness.Spec{Name: name, Etcd: in.EtcdEndpoint, Prefix: runner.EtcdPrefix(name),
		Meta: storage.ClusterMeta{Shards: shards, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName},
		S3:   harness.S3{Endpoint: in.S3Endpoint, Region: in.S3Region, AccessKey: in.AccessKey, SecretKey: in.SecretKey, Bucket: in.Bucket}})}
	base := c.RunnerConfig(in.EtcdEndpoint)
	if e.o.onS3() {
		// No etcd section: an S3 runner needs none.
		base = slices.DeleteFunc(base, func(kv string) bool { return strings.HasPrefix(kv, "etcd.") })
		base = append(base, "coordination="+CoordinationS3)
	}
	c.overrides = append(base,
		"lease.ttl="+LeaseTTL.String(),
		"drain_timeout=10s",
		"admin_addr=127.0.0.1:0",
		"log.level=warn",
	)
	if e.o.onS3() {
		c.store, err = c.s3Store(ctx, direct)
	} else {
		c.etcd, err = c.Store(ctx, "", etcd.WithRequestTimeout(5*time.Second))
		c.store = c.etcd
	}
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", scenario, err)
	}
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	c.locks = harness.WatchLocks(wctx, c.store)
	e.onClose(func() {
		stopWatch()
		c.locks.Wait()
	})
	return c, nil
}

// s3Store opens the bench's coordination store of an S3 cluster: the
// runners' keys (runner.CoordPrefix of their config) on a connection of
// its own to endpoint, polling at the shortest interval the runners use,
// so that it sees a change no later than they do.
func (c *cluster) s3Store(ctx context.Context, endpoint string) (storage.RunnerStore, error) {
	cfg, err := c.config("bench-observer")
	if err != nil {
		return nil, err
	}
	cc := s3store.DefaultClientConfig()
	cc.Endpoint, cc.Region, cc.UsePathStyle = endpoint, c.S3.Region, true
	cc.AccessKey, cc.SecretKey = c.S3.AccessKey, c.S3.SecretKey
	client, err := s3store.NewClient(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("s3 %s: %w", endpoint, err)
	}
	obj, err := s3store.New(client, c.S3.Bucket, s3store.WithPrefix(runner.CoordPrefix(cfg)), s3store.WithRequestTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("coordination store at %s/%s: %w", endpoint, c.S3.Bucket, err)
	}
	poll := cfg.S3Coord.PollMin.Std()
	c.s3Poll = poll
	st, err := s3coord.New(obj, s3coord.WithRequestTimeout(5*time.Second), s3coord.WithPollInterval(poll, poll),
		s3coord.WithEndpoint(endpoint+"/"+c.S3.Bucket))
	if err != nil {
		return nil, fmt.Errorf("coordination store at %s/%s: %w", endpoint, c.S3.Bucket, err)
	}
	c.env.onClose(func() { st.Close() })
	return st, nil
}

// config returns the runner config of runner id.
func (c *cluster) config(id string, extra ...string) (runner.Config, error) {
	// No config file, whatever the working directory holds: the bench's
	// runners are configured by their overrides alone.
	cfg, err := runner.Load(os.DevNull, nil, append(append(slices.Clone(c.overrides), "runner_id="+id), extra...))
	if err != nil {
		return runner.Config{}, fmt.Errorf("bench: runner %s config: %w", id, err)
	}
	return cfg, nil
}

// connectOptions are the runner.Connect options of the bench's clients:
// on etcd, the bench's etcd client; on S3, none, so that each client opens
// its own coordination store on its own S3 connection (as `tenure task
// submit` does), and its requests are counted where its S3 requests are.
func (c *cluster) connectOptions() []runner.ClientOption {
	opts := []runner.ClientOption{runner.WithClientLogger(slog.New(slog.DiscardHandler))}
	if c.etcd != nil {
		opts = append(opts, runner.WithEtcdClient(c.etcd.Client()))
	}
	return opts
}

// client returns a task client of the cluster, on an S3 connection of its
// own, whose submissions wake the owners through the coordination store,
// as `tenure task submit` does; extra are config overrides of its S3
// connection. It is runner.Connect with connectOptions: a runner must have
// created the cluster meta first.
func (c *cluster) client(ctx context.Context, extra ...string) (*task.Client, error) {
	cfg, err := c.config("bench-client", extra...)
	if err != nil {
		return nil, err
	}
	cl, err := runner.Connect(ctx, cfg, c.connectOptions()...)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	c.env.onClose(func() { cl.Close() })
	return cl.Client, nil
}

func (c *cluster) converged(ctx context.Context, ids []string) error {
	want := slices.Sorted(slices.Values(ids))
	if err := harness.Await(ctx, convergeTimeout, c.pollEvery(20*time.Millisecond), func() (bool, string, error) {
		return c.isConverged(ctx, want)
	}); err != nil {
		return fmt.Errorf("bench: cluster %s did not converge: %w", c.Name, err)
	}
	return nil
}

// readTimeout bounds one read of the bench's coordination store. On S3 a
// read of every shard lock is a LIST and a GET per changed lock: on a
// busy machine that takes seconds.
const readTimeout = 15 * time.Second

func (c *cluster) isConverged(ctx context.Context, want []string) (bool, string, error) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	runners, _, err := c.store.Runners(rctx)
	if err != nil {
		return c.readFailed("the runners", err)
	}
	cands, why := registeredAs(runners, want)
	if why != "" {
		return false, why, nil
	}
	if c.etcd == nil {
		// On S3 the lock watch is itself a poll of every lock, at the
		// shortest interval: a read of them here too would double the
		// bench's load on the server for nothing.
		ok, why := c.assigned(cands, c.locks.Holders())
		return ok, why, nil
	}
	holders, err := harness.Holders(rctx, c.store)
	if err != nil {
		return c.readFailed("the shard locks", err)
	}
	ok, why := c.assigned(cands, holders)
	if ok && c.locks != nil && !maps.Equal(c.locks.Holders(), holders) {
		// The trials read the holders from the watched timeline: it must
		// have caught up with the read above. A cold start that locks
		// every shard in one burst converges before the watch delivers it.
		return false, "the lock watch has not caught up with the coordination store", nil
	}
	return ok, why, nil
}

// pollEvery is the interval of the bench's own polls of the coordination
// store: onEtcd on etcd, where a read is one range request; on S3, where
// one is a LIST and a GET per changed record, the runners' shortest
// poll interval (what the bench's lock watch polls at), or onEtcd if
// longer.
func (c *cluster) pollEvery(onEtcd time.Duration) time.Duration {
	if c.etcd != nil {
		return onEtcd
	}
	return max(onEtcd, c.s3Poll)
}

// readFailed is a convergence poll's answer to a failed read of what: a
// transient one (storage.IsRetryable: a timeout, an unreachable server)
// is a reason to wait on, and the wait's deadline ends it; any other fails
// the wait.
func (c *cluster) readFailed(what string, err error) (bool, string, error) {
	if storage.IsRetryable(err) {
		return false, fmt.Sprintf("reading %s failed: %v", what, err), nil
	}
	return false, "", fmt.Errorf("bench: cluster %s: reading %s: %w", c.Name, what, err)
}

// registeredAs returns the placement candidates of runners, or why not
// when their ids are not want (sorted).
func registeredAs(runners []storage.RunnerInfo, want []string) ([]placement.Candidate, string) {
	var ids []string
	var cands []placement.Candidate
	for _, r := range runners {
		ids = append(ids, r.ID)
		cands = append(cands, placement.CandidateOf(r))
	}
	sort.Strings(ids)
	if !slices.Equal(ids, want) {
		return nil, fmt.Sprintf("registered runners %v, want %v", ids, want)
	}
	return cands, ""
}

// assigned reports whether holders lock every shard as the runners'
// own assignment code (placement.Reassign from the current holders, as a
// runner computes it) gives them to cands, or why not.
func (c *cluster) assigned(cands []placement.Candidate, holders map[storage.ShardID]string) (bool, string) {
	current := placement.Assignment(holders)
	if len(current) != c.Meta.Shards*len(c.Meta.Groups) {
		return false, fmt.Sprintf("%d of %d shards locked", len(current), c.Meta.Shards*len(c.Meta.Groups))
	}
	next := placement.Reassign(c.Meta.Groups, c.Meta.Shards, cands, current)
	if !maps.Equal(next, current) {
		return false, fmt.Sprintf("locks [%s] differ from the assignment [%s]", describeCounts(current.Counts()), describeCounts(next.Counts()))
	}
	return true, ""
}

// describeCounts renders shard counts by runner, sorted.
func describeCounts(counts map[string]int) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", id, counts[id]))
	}
	return strings.Join(parts, " ")
}
