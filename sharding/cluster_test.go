package sharding

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testConfig is a fast configuration: 2s leases (margin and keep-alive
// interval 666ms), short windows.
func testConfig() Config {
	cfg := DefaultConfigFor(2 * time.Second)
	cfg.Detachment.RecoverWindow = 500 * time.Millisecond
	cfg.RebalanceDebounce = 50 * time.Millisecond
	cfg.RebalanceInterval = 2 * time.Second
	cfg.AcquireRetryWindow = time.Second
	cfg.InterruptTimeout = time.Second
	cfg.ProbeInterval = 100 * time.Millisecond
	return cfg
}

// cluster is a test cluster of Managers on the shared etcd (see package
// harness), each with its own store and proxy, and an ownership ledger.
type cluster struct {
	*harness.Cluster
	t      testing.TB
	srv    *testenv.Etcd
	cfg    Config
	ledger ledger
	nodes  harness.Members[*testRunner]
}

// testRunner is one runner of a test cluster, with its own connection to
// etcd through a proxy so the test can partition it alone.
type testRunner struct {
	*harness.Run
	id          string
	proxy       *testenv.Proxy
	mgr         *Manager
	transitions harness.Transitions
}

func newCluster(t *testing.T, shards int, cfg Config) *cluster { return newClusterTB(t, shards, cfg) }

func newClusterTB(t testing.TB, shards int, cfg Config) *cluster {
	srv := testenv.SharedEtcd(t)
	return &cluster{
		Cluster: harness.New(t, harness.Spec{Etcd: srv.Endpoint(), Prefix: testenv.Prefix(t),
			Meta: storage.ClusterMeta{Shards: shards, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName}}),
		t:      t,
		srv:    srv,
		cfg:    cfg,
		ledger: ledger{harness.NewLedger()},
	}
}

// storeVia opens a store in the cluster's namespace through a new proxy.
func (c *cluster) storeVia() (*etcd.Store, *testenv.Proxy) {
	c.t.Helper()
	st, p, err := c.ProxiedStore(context.Background(), etcd.WithRequestTimeout(time.Second))
	if err != nil {
		c.t.Fatal(err)
	}
	return st, p
}

// store opens a store in the cluster's namespace.
func (c *cluster) store() *etcd.Store {
	st, _ := c.storeVia()
	return st
}

func (c *cluster) start(id string, weight float64) *testRunner {
	return c.startWith(id, weight, nil)
}

// startWith starts a runner whose store is wrapped by wrap (nil: none).
func (c *cluster) startWith(id string, weight float64, wrap func(storage.RunnerStore) storage.RunnerStore) *testRunner {
	c.t.Helper()
	return c.prepare(id, weight, wrap)()
}

// prepare sets a runner up — its store, connected, and its Manager — and
// returns the function that starts it, so that a test can start many
// runners at one instant. The returned function is safe to call from
// another goroutine than the other prepared runners' (not from several
// goroutines for one runner).
func (c *cluster) prepare(id string, weight float64, wrap func(storage.RunnerStore) storage.RunnerStore) func() *testRunner {
	t := c.t
	t.Helper()
	st, p := c.storeVia()
	var rs storage.RunnerStore = st
	if wrap != nil {
		rs = wrap(st)
	}
	if _, err := st.EnsureMeta(context.Background(), c.Meta); err != nil {
		t.Fatal(err)
	}
	self := storage.RunnerInfo{ID: id, Weight: weight, Groups: []string{storage.DefaultGroup}, Version: "test"}
	mgr, err := New(rs, self, c.Meta, c.cfg, WithHandler(c.ledger.handler(id)), WithRegistry(prometheus.NewRegistry()), WithLogger(testLogger(t, id)))
	if err != nil {
		t.Fatal(err)
	}
	r := &testRunner{id: id, proxy: p, mgr: mgr}
	mgr.Machine().Subscribe(r.transitions.Record)
	return func() *testRunner {
		r.Run = harness.Go(mgr.Run)
		t.Cleanup(func() { r.stop(t) })
		c.nodes.Add(id, r)
		return r
	}
}

// stop ends the runner's Run (interrupt, revoke) and waits for it.
func (r *testRunner) stop(t testing.TB) {
	if !r.Running() {
		return // stopped already (by its test, or at cleanup)
	}
	if err := r.mgr.checkShards(); err != nil {
		t.Errorf("runner %s: %v", r.id, err)
	}
	switch err := r.Stop(15 * time.Second); {
	case errors.Is(err, harness.ErrStopTimeout):
		t.Errorf("runner %s: Run did not return", r.id)
	case err != nil:
		t.Errorf("runner %s: Run: %v", r.id, err)
	default:
		if err := r.mgr.checkStopped(); err != nil {
			t.Errorf("runner %s: %v", r.id, err)
		}
	}
}

func (r *testRunner) transitionsOf(kind detachment.TransitionKind) []detachment.Transition {
	return r.transitions.Of(kind)
}

// runner returns the runner started as id.
func (c *cluster) runner(id string) *testRunner { return c.nodes.Get(id) }

// members returns the running runners, by id.
func (c *cluster) members() []*testRunner { return c.nodes.Running() }

// ledger is the cluster's ownership ledger, fed by every runner's
// Handler: the check that no two runners own a shard at once.
type ledger struct{ *harness.Ledger }

func (l ledger) handler(runner string) Handler { return &recorder{l: l.Ledger, runner: runner} }

// checkNoOverlap fails if two runners' spans of one shard overlap in time.
func (l ledger) checkNoOverlap(t *testing.T) {
	t.Helper()
	for _, o := range l.Overlaps() {
		t.Error(o)
	}
}

// recorder is a runner's Handler: it reports the runner's ownerships to
// the ledger.
type recorder struct {
	l      *harness.Ledger
	runner string
}

func (r *recorder) ShardAcquired(o Ownership) { r.l.Acquired(r.runner, o.Shard, o.Epoch) }

func (r *recorder) ShardReleasing(_ context.Context, o Ownership) { r.end(o, LossReleased) }

func (r *recorder) ShardLost(o Ownership, reason LossReason) { r.end(o, reason) }

func (r *recorder) end(o Ownership, reason LossReason) {
	if o.Ctx.Err() == nil {
		panic(fmt.Sprintf("%s: shard %s ended with its context still live", r.runner, o.Shard))
	}
	r.l.Ended(r.runner, o.Shard, o.Epoch, string(reason))
}

// candidates describes the given runners to the assignment.
func (c *cluster) candidates(rs []*testRunner) []placement.Candidate {
	var cands []placement.Candidate
	for _, r := range rs {
		cands = append(cands, placement.Candidate{ID: r.id, Weight: r.mgr.self.Weight, Groups: r.mgr.self.Groups})
	}
	return cands
}

// ownership returns who owns each shard now, failing on a shard owned twice
// by attached runners in one pass.
func (c *cluster) ownership(rs []*testRunner) (map[storage.ShardID]string, bool) {
	own := map[storage.ShardID]string{}
	ok := true
	for _, r := range rs {
		st := r.mgr.Status()
		if !st.Attached {
			ok = false
			continue
		}
		for _, o := range st.Owned {
			if prev, dup := own[o.Shard]; dup {
				_ = prev
				ok = false
			}
			own[o.Shard] = r.id
		}
	}
	return own, ok
}

// waitConverged waits until the runners in rs are attached and own every
// shard once, as the assignment computed from that ownership says (a fixed
// point of placement.Reassign: balanced, nothing left to move).
func (c *cluster) waitConverged(rs []*testRunner, within time.Duration) map[storage.ShardID]string {
	c.t.Helper()
	proc, err := placement.ProcedureNamed(c.Meta.Hash)
	if err != nil {
		c.t.Fatal(err)
	}
	var own map[storage.ShardID]string
	err = harness.Await(context.Background(), within, 10*time.Millisecond, func() (bool, string, error) {
		var ok bool
		own, ok = c.ownership(rs)
		want := proc.Reassign(c.Meta.Groups, c.Meta.Shards, c.candidates(rs), own)
		return ok && maps.Equal(own, want), fmt.Sprintf("%d/%d shards owned as assigned", countMatch(own, want), len(want)), nil
	})
	if err != nil {
		var desc []string
		for _, r := range rs {
			st := r.mgr.Status()
			desc = append(desc, fmt.Sprintf("%s: attached=%v owned=%d assigned=%d pending=%d runners=%d",
				r.id, st.Attached, len(st.Owned), len(st.Assigned), len(st.Pending), st.Runners))
		}
		c.t.Fatalf("not converged: %v\n%s", err, desc)
	}
	return own
}

func countMatch(own map[storage.ShardID]string, want placement.Assignment) int {
	n := 0
	for s, r := range want {
		if own[s] == r {
			n++
		}
	}
	return n
}

// sampler checks, over and over while it runs, that no shard is owned by two
// attached runners at one instant. A pass takes every runner's status twice
// (A B C A B C); two runners showing the same shard prove a double
// ownership when one of them owned it, under the same epoch, from before the
// other's snapshot until after it.
type sampler struct {
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	bad     []string
	samples int
}

func (c *cluster) sample() *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	c.t.Cleanup(s.halt) // a failed test must not leave it running
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			s.pass(c.members())
		}
	}()
	return s
}

type snap struct {
	runner   string
	from, to time.Time
	status   Status
}

func (s *sampler) pass(rs []*testRunner) {
	var snaps []snap
	for round := 0; round < 2; round++ {
		for _, r := range rs {
			from := time.Now()
			st := r.mgr.Status()
			snaps = append(snaps, snap{runner: r.id, from: from, to: time.Now(), status: st})
		}
	}
	// ownedAcross: some snapshot shows runner a owning shard since before
	// t0, and a snapshot taken after t1 shows the same ownership (same
	// since, same epoch) still held: a owned it throughout [t0, t1].
	ownedAcross := func(a string, shard storage.ShardID, t0, t1 time.Time) bool {
		find := func(sn snap) (Ownership, bool) {
			if sn.runner != a || !sn.status.Attached {
				return Ownership{}, false
			}
			for _, o := range sn.status.Owned {
				if o.Shard == shard {
					return o, true
				}
			}
			return Ownership{}, false
		}
		for _, early := range snaps {
			o1, ok := find(early)
			if !ok || o1.Since.After(t0) {
				continue
			}
			for _, late := range snaps {
				if late.from.Before(t1) {
					continue
				}
				if o2, ok := find(late); ok && o2.Epoch == o1.Epoch && o2.Since.Equal(o1.Since) {
					return true
				}
			}
		}
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	for _, x := range snaps {
		if !x.status.Attached {
			continue
		}
		for _, o := range x.status.Owned {
			for _, y := range snaps {
				if y.runner == x.runner || !y.status.Attached {
					continue
				}
				for _, p := range y.status.Owned {
					if p.Shard == o.Shard && ownedAcross(y.runner, o.Shard, x.from, x.to) {
						s.bad = append(s.bad, fmt.Sprintf("shard %s owned by %s (epoch %d) and %s (epoch %d) at once", o.Shard, x.runner, o.Epoch, y.runner, p.Epoch))
					}
				}
			}
		}
	}
}

func (s *sampler) halt() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

func (s *sampler) finish(t *testing.T) {
	t.Helper()
	s.halt()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.samples == 0 {
		t.Fatal("sampler took no samples")
	}
	for _, b := range s.bad[:min(len(s.bad), 10)] {
		t.Error(b)
	}
	t.Logf("ownership sampled %d times", s.samples)
}
