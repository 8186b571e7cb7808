package tenuretest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/netproxy"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/internal/testenv/poll"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// Main runs a package's tests, then stops the embedded etcd and S3 servers
// that clusters started, and removes their data. A package that calls
// NewCluster calls it from its TestMain:
//
//	func TestMain(m *testing.M) { tenuretest.Main(m) }
func Main(m *testing.M) { testenv.Main(m) }

// WaitFor checks cond every few milliseconds until it holds, and fails tb
// if it does not within the bound: how a cluster test waits for what it
// expects (a shard moved, a call answered), never with a bare sleep.
func WaitFor(tb testing.TB, what string, within time.Duration, cond func() bool) {
	tb.Helper()
	testenv.WaitFor(tb, what, within, cond)
}

// ClusterOptions shape a Cluster.
type ClusterOptions struct {
	// Runners is how many runners start (default 1).
	Runners int
	// Entities are the types every runner hosts.
	Entities []*entity.Definition
	// Types registers more types on every runner (runner.WithTypes).
	Types func(*entity.Host) error
	// Shards is the cluster's shard count (default 8).
	Shards int
	// Config is more runner config, as key=value overrides (the keys of
	// a runner's config file, e.g. "entity.max_idle=1s"), applied after
	// the cluster's own.
	Config []string
}

// Cluster is a Tenure cluster in the test process: runners (package
// runner) on the binary's embedded etcd and S3 gateway, in a namespace of
// their own (an etcd prefix and a bucket). Each runner reaches etcd
// through a proxy of its own, which Kill and Partition cut. Everything
// stops at the test's cleanup. Its methods fail the test on error; call
// them from the test's goroutine.
type Cluster struct {
	tb   testing.TB
	spec *harness.Cluster
	opts ClusterOptions

	mu     sync.Mutex
	nodes  []*node
	client *runner.Client
}

// node is one runner slot of a Cluster.
type node struct {
	id    string
	r     *runner.Runner
	run   *harness.Run
	proxy *netproxy.Proxy
	gen   int // restarts
}

// clusterTimings make shard moves take a few seconds rather than a lease
// of the default length: a cluster test waits for them.
var clusterTimings = []string{
	"admin_addr=127.0.0.1:0", "etcd.request_timeout=1s", "lease.ttl=2s", "detachment.recover_window=500ms",
	"sharding.rebalance_debounce=50ms", "sharding.rebalance_interval=2s", "sharding.interrupt_timeout=2s",
	"entity.task_lease=3s", "drain_timeout=5s", "log.level=warn",
}

// stopWithin bounds a runner's stop (its drain is bounded by
// drain_timeout, the rest by the interrupt timeout).
const stopWithin = 30 * time.Second

// NewCluster starts a cluster of o.Runners runners hosting o.Entities and
// waits until every shard is owned (at most 30 s). The embedded servers
// start on the first call in the test binary (see Main); the S3 gateway's
// start changes the process's working directory, so resolve relative
// paths (testdata) before.
func NewCluster(tb testing.TB, o ClusterOptions) *Cluster {
	tb.Helper()
	if o.Runners == 0 {
		o.Runners = 1
	}
	if o.Shards == 0 {
		o.Shards = 8
	}
	if o.Runners < 0 || o.Shards < 0 {
		tb.Fatalf("tenuretest.NewCluster: Runners %d, Shards %d: must not be negative", o.Runners, o.Shards)
	}
	var check entity.Types // a bad definition fails here, naming it, not in each runner
	for i, d := range o.Entities {
		if d == nil {
			tb.Fatalf("tenuretest.NewCluster: Entities[%d] is nil", i)
		}
		if err := check.Define(d); err != nil {
			tb.Fatalf("tenuretest.NewCluster: %v", err)
		}
	}
	srv, s3 := testenv.SharedEtcd(tb), testenv.SharedS3(tb)
	ak, sk := s3.Credentials()
	name := testenv.Name(tb, 40)
	c := &Cluster{tb: tb, opts: o, spec: harness.New(tb, harness.Spec{
		Name: name, Etcd: srv.Endpoint(), Prefix: runner.EtcdPrefix(name),
		Meta: storage.ClusterMeta{Shards: o.Shards, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName},
		S3:   harness.S3{Endpoint: s3.Endpoint(), Region: s3.Region(), AccessKey: ak, SecretKey: sk, Bucket: s3.Bucket(tb)},
	})}
	for i := range o.Runners {
		c.nodes = append(c.nodes, &node{id: "runner-" + strconv.Itoa(i)})
		c.start(i)
	}
	for i := range o.Runners {
		c.awaitReady(i)
	}
	c.AwaitOwned(30 * time.Second)
	cfg := c.config(c.spec.Etcd, "client")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := runner.Connect(ctx, cfg)
	if err != nil {
		tb.Fatalf("tenuretest: client of cluster %s: %v", name, err)
	}
	tb.Cleanup(func() { cl.Close() })
	c.client = cl
	return c
}

// config is a runner config of the cluster reaching etcd at endpoint.
func (c *Cluster) config(endpoint, id string) runner.Config {
	c.tb.Helper()
	kv := append(c.spec.RunnerConfig(endpoint), "runner_id="+id)
	kv = append(append(kv, clusterTimings...), c.opts.Config...)
	cfg, err := runner.Load(os.DevNull, nil, kv)
	if err != nil {
		c.tb.Fatalf("tenuretest: runner config: %v", err)
	}
	return cfg
}

// start starts slot i's runner, with a new proxy to etcd.
func (c *Cluster) start(i int) {
	c.tb.Helper()
	n := c.nodes[i]
	p, err := c.spec.Proxy()
	if err != nil {
		c.tb.Fatalf("tenuretest: %v", err)
	}
	id := n.id
	if n.gen > 0 {
		id += "." + strconv.Itoa(n.gen)
	}
	defs, more := c.opts.Entities, c.opts.Types
	r, err := runner.New(c.config(harness.ProxyURL(p), id), runner.WithTypes(func(h *entity.Host) error {
		for _, d := range defs {
			if err := h.Define(d); err != nil {
				return err
			}
		}
		if more != nil {
			return more(h)
		}
		return nil
	}))
	if err != nil {
		c.tb.Fatalf("tenuretest: runner %s: %v", id, err)
	}
	run := harness.Go(r.Run)
	c.mu.Lock()
	n.r, n.run, n.proxy = r, run, p
	c.mu.Unlock()
	c.tb.Cleanup(func() { c.stopRun(id, run) })
}

// stopRun stops a runner's Run and reports how it ended.
func (c *Cluster) stopRun(id string, run *harness.Run) {
	switch err := run.Stop(stopWithin); {
	case errors.Is(err, harness.ErrStopTimeout):
		c.tb.Errorf("tenuretest: runner %s did not stop within %s", id, stopWithin)
	case err != nil:
		c.tb.Errorf("tenuretest: runner %s: %v", id, err)
	}
}

// node returns slot i, failing the test for an index out of range.
func (c *Cluster) node(i int) *node {
	c.tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.nodes) {
		c.tb.Fatalf("tenuretest: runner %d: the cluster has runners 0 to %d", i, len(c.nodes)-1)
	}
	return c.nodes[i]
}

// Client is a client of the cluster (runner.Connect): Call, Send and
// Invoke reach entities wherever they live, and Submit runs tasks. It
// reaches etcd directly, so cutting a runner off leaves it working. It is
// closed at cleanup.
func (c *Cluster) Client() *runner.Client { return c.client }

// Runner is runner i (from 0), as last started.
func (c *Cluster) Runner(i int) *runner.Runner { return c.node(i).r }

// Size is the number of runners the cluster was made with, stopped ones
// included.
func (c *Cluster) Size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes)
}

// Stop stops runner i gracefully, as SIGTERM does: it hands its shards
// over, revokes its lease and returns. A runner already stopped is left
// as it is.
func (c *Cluster) Stop(i int) {
	c.tb.Helper()
	n := c.node(i)
	if !n.run.Running() {
		return
	}
	c.stopRun(n.r.Config().RunnerID, n.run)
}

// Kill stops runner i as a crash would, as far as the cluster sees: its
// way to etcd is cut first (connections reset), so that it neither hands
// its shards over nor revokes its lease; the others take its shards once
// its lease expires (lease.ttl, 2 s here). It returns once the runner
// has stopped, which takes about as long: its own stop's etcd requests
// time out.
func (c *Cluster) Kill(i int) {
	c.tb.Helper()
	n := c.node(i)
	if !n.run.Running() {
		return
	}
	n.proxy.SetMode(netproxy.Reset)
	c.stopRun(n.r.Config().RunnerID, n.run)
}

// Restart starts a new runner in slot i, stopped (Stop, Kill) before, with
// a runner id of its own (runner-<i>.<n>: its predecessor's lease may
// still be alive after a Kill), and waits until it is registered and
// attached; it takes its share of the shards soon after (AwaitOwned does
// not wait for that: the others own them meanwhile).
func (c *Cluster) Restart(i int) {
	c.tb.Helper()
	n := c.node(i)
	if n.run.Running() {
		c.tb.Fatalf("tenuretest: Restart(%d): runner %s is running: Stop or Kill it first", i, n.r.Config().RunnerID)
	}
	c.mu.Lock()
	n.gen++
	c.mu.Unlock()
	c.start(i)
	c.awaitReady(i)
}

// readyWithin bounds a runner's start: connecting, registering, attaching.
const readyWithin = 20 * time.Second

// awaitReady waits until runner i is registered and attached, failing the
// test if it is not within readyWithin or its Run returns first.
func (c *Cluster) awaitReady(i int) {
	c.tb.Helper()
	n := c.node(i)
	err := poll.Until(context.Background(), readyWithin, poll.Every, func() (bool, string, error) {
		if done, err := n.run.Exited(); done {
			return false, "", fmt.Errorf("its Run returned: %v", err)
		}
		st := n.r.Status()
		return st.Registered && st.Attached, fmt.Sprintf("registered %v, attached %v", st.Registered, st.Attached), nil
	})
	if err != nil {
		c.tb.Fatalf("tenuretest: runner %s did not start: %v", n.r.Config().RunnerID, err)
	}
}

// Partition cuts runner i off from etcd, keeping its connections open
// with nothing going through (a network partition): it detaches when its
// lease can no longer be renewed, stops running what it holds, and the
// others take its shards. Heal ends it.
func (c *Cluster) Partition(i int) {
	c.tb.Helper()
	c.node(i).proxy.SetMode(netproxy.Blackhole)
}

// Heal reconnects runner i to etcd after a Partition: it attaches again
// and takes its share of the shards back.
func (c *Cluster) Heal(i int) {
	c.tb.Helper()
	c.node(i).proxy.SetMode(netproxy.Pass)
}

// Owner returns the index of the runner that owns the shard of the entity
// (typ, id) now, -1 if none does (its shard is moving).
func (c *Cluster) Owner(typ, id string) int {
	c.tb.Helper()
	shard := task.ShardOf(storage.DefaultGroup, c.opts.Shards, typ, id, "").String()
	c.mu.Lock()
	nodes := append([]*node(nil), c.nodes...)
	c.mu.Unlock()
	for i, n := range nodes {
		if !n.run.Running() {
			continue
		}
		for _, s := range n.r.Status().OwnedShards {
			if s == shard {
				return i
			}
		}
	}
	return -1
}

// AwaitOwned waits until every shard of the cluster is owned by one of
// the running runners, failing the test if that does not happen within
// the bound.
func (c *Cluster) AwaitOwned(within time.Duration) {
	c.tb.Helper()
	err := poll.Until(context.Background(), within, poll.Every, func() (bool, string, error) {
		c.mu.Lock()
		nodes := append([]*node(nil), c.nodes...)
		c.mu.Unlock()
		owned := map[string]string{}
		var twice []string
		for _, n := range nodes {
			if !n.run.Running() {
				continue
			}
			st := n.r.Status()
			for _, s := range st.OwnedShards {
				if prev, dup := owned[s]; dup {
					twice = append(twice, fmt.Sprintf("%s by %s and %s", s, prev, st.RunnerID))
				}
				owned[s] = st.RunnerID
			}
		}
		switch {
		case len(twice) > 0:
			return false, "shards reported owned twice: " + strings.Join(twice, ", "), nil
		case len(owned) < c.opts.Shards:
			return false, fmt.Sprintf("%d of %d shards owned", len(owned), c.opts.Shards), nil
		}
		return true, "", nil
	})
	if err != nil {
		c.tb.Fatalf("tenuretest: waiting for every shard to be owned: %v", err)
	}
}
