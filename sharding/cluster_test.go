package sharding

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/internal/testenv"
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

// span is one ownership of a shard by a runner, as the handler saw it.
type span struct {
	runner     string
	shard      storage.ShardID
	epoch      int64
	start, end time.Time // end zero while owned
	reason     LossReason
	ctx        context.Context
}

// ledger records every ownership of every runner of a test cluster, with one
// clock.
type ledger struct {
	mu    sync.Mutex
	spans []*span
	open  map[string]map[storage.ShardID]*span // runner → shard → open span
}

func newLedger() *ledger { return &ledger{open: map[string]map[storage.ShardID]*span{}} }

func (l *ledger) handler(runner string) Handler { return &recorder{l: l, runner: runner} }

type recorder struct {
	l      *ledger
	runner string
}

func (r *recorder) ShardAcquired(o Ownership) {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if r.l.open[r.runner] == nil {
		r.l.open[r.runner] = map[storage.ShardID]*span{}
	}
	if prev := r.l.open[r.runner][o.Shard]; prev != nil {
		panic(fmt.Sprintf("%s: shard %s acquired twice without an end", r.runner, o.Shard))
	}
	s := &span{runner: r.runner, shard: o.Shard, epoch: o.Epoch, start: time.Now(), ctx: o.Ctx}
	r.l.open[r.runner][o.Shard] = s
	r.l.spans = append(r.l.spans, s)
}

func (r *recorder) ShardReleasing(_ context.Context, o Ownership) { r.end(o, LossReleased) }

func (r *recorder) ShardLost(o Ownership, reason LossReason) { r.end(o, reason) }

func (r *recorder) end(o Ownership, reason LossReason) {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	s := r.l.open[r.runner][o.Shard]
	if s == nil || s.epoch != o.Epoch {
		panic(fmt.Sprintf("%s: end of shard %s epoch %d that was not acquired", r.runner, o.Shard, o.Epoch))
	}
	if o.Ctx.Err() == nil {
		panic(fmt.Sprintf("%s: shard %s ended with its context still live", r.runner, o.Shard))
	}
	s.end, s.reason = time.Now(), reason
	delete(r.l.open[r.runner], o.Shard)
}

// checkNoOverlap fails if two runners' spans of one shard overlap in time.
// Spans start when the handler learns of the ownership (after the lock was
// taken) and end when it learns of its end (after the context was
// cancelled), so a real overlap can only look longer here, never vanish.
func (l *ledger) checkNoOverlap(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	by := map[storage.ShardID][]*span{}
	for _, s := range l.spans {
		by[s.shard] = append(by[s.shard], s)
	}
	for shard, ss := range by {
		for i, a := range ss {
			for _, b := range ss[i+1:] {
				if a.runner == b.runner {
					continue
				}
				aEnd, bEnd := a.end, b.end
				if aEnd.IsZero() {
					aEnd = time.Now()
				}
				if bEnd.IsZero() {
					bEnd = time.Now()
				}
				if a.start.Before(bEnd) && b.start.Before(aEnd) {
					t.Errorf("shard %s owned by %s [%v, %v) and %s [%v, %v) at once",
						shard, a.runner, a.start.Format("15:04:05.000"), a.end.Format("15:04:05.000"),
						b.runner, b.start.Format("15:04:05.000"), b.end.Format("15:04:05.000"))
				}
			}
		}
	}
}

// acquiredAfter returns the spans started at or after t.
func (l *ledger) acquiredAfter(t time.Time) []*span {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*span
	for _, s := range l.spans {
		if !s.start.Before(t) {
			out = append(out, s)
		}
	}
	return out
}

// testRunner is one runner of a test cluster, with its own connection to
// etcd through a proxy so the test can partition it alone.
type testRunner struct {
	id     string
	proxy  *testenv.Proxy
	store  *etcd.Store
	mgr    *Manager
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
	// running is read by the sampler's goroutine while stop may run.
	running atomic.Bool

	mu          sync.Mutex
	transitions []detachment.Transition
}

type cluster struct {
	t      testing.TB
	srv    *testenv.Etcd
	ns     string
	meta   storage.ClusterMeta
	cfg    Config
	ledger *ledger

	mu      sync.Mutex
	runners map[string]*testRunner
}

func newCluster(t *testing.T, shards int, cfg Config) *cluster { return newClusterTB(t, shards, cfg) }

func newClusterTB(t testing.TB, shards int, cfg Config) *cluster {
	return &cluster{
		t:       t,
		srv:     testenv.SharedEtcd(t),
		ns:      testenv.Prefix(t),
		meta:    storage.ClusterMeta{Shards: shards, Groups: []string{storage.DefaultGroup}, Hash: HashName},
		cfg:     cfg,
		ledger:  newLedger(),
		runners: map[string]*testRunner{},
	}
}

// store opens a store in the cluster's namespace through a new proxy.
func (c *cluster) storeVia() (*etcd.Store, *testenv.Proxy) {
	t := c.t
	t.Helper()
	u, err := url.Parse(c.srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewProxy(t, u.Host)
	cli := testenv.ClientAt(t, "http://"+p.Addr())
	st, err := etcd.New(cli, etcd.WithPrefix(c.ns), etcd.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
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
	t := c.t
	t.Helper()
	st, p := c.storeVia()
	var rs storage.RunnerStore = st
	if wrap != nil {
		rs = wrap(st)
	}
	ctx := context.Background()
	if _, err := st.EnsureMeta(ctx, c.meta); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	self := storage.RunnerInfo{ID: id, Weight: weight, Groups: []string{storage.DefaultGroup}, Version: "test"}
	mgr, err := New(rs, self, c.meta, c.cfg, WithHandler(c.ledger.handler(id)), WithRegistry(reg), WithLogger(testLogger(t, id)))
	if err != nil {
		t.Fatal(err)
	}
	r := &testRunner{id: id, proxy: p, store: st, mgr: mgr, reg: reg, done: make(chan error, 1)}
	mgr.Machine().Subscribe(func(tr detachment.Transition) {
		r.mu.Lock()
		r.transitions = append(r.transitions, tr)
		r.mu.Unlock()
	})
	rctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	r.running.Store(true)
	go func() { r.done <- mgr.Run(rctx) }()
	t.Cleanup(func() { r.stop(t) })
	c.mu.Lock()
	c.runners[id] = r
	c.mu.Unlock()
	return r
}

// stop ends the runner's Run (interrupt, revoke) and waits for it.
func (r *testRunner) stop(t testing.TB) {
	if r.cancel == nil {
		return
	}
	r.running.Store(false)
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("runner %s: Run: %v", r.id, err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("runner %s: Run did not return", r.id)
	}
}

func (r *testRunner) transitionsOf(kind detachment.TransitionKind) []detachment.Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []detachment.Transition
	for _, tr := range r.transitions {
		if tr.Kind == kind {
			out = append(out, tr)
		}
	}
	return out
}

func (c *cluster) members() []*testRunner {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*testRunner
	for _, r := range c.runners {
		if r.running.Load() {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *testRunner) int { return cmpString(a.id, b.id) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// candidates describes the given runners to the assignment.
func (c *cluster) candidates(rs []*testRunner) []Candidate {
	var cands []Candidate
	for _, r := range rs {
		cands = append(cands, Candidate{ID: r.id, Weight: r.mgr.self.Weight, Groups: r.mgr.self.Groups})
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
// point of Reassign: balanced, nothing left to move).
func (c *cluster) waitConverged(rs []*testRunner, within time.Duration) map[storage.ShardID]string {
	c.t.Helper()
	deadline := time.Now().Add(within)
	var want Assignment
	for {
		own, ok := c.ownership(rs)
		proc, err := ProcedureNamed(c.meta.Hash)
		if err != nil {
			c.t.Fatal(err)
		}
		want = proc.Reassign(c.meta.Groups, c.meta.Shards, c.candidates(rs), own)
		if ok && len(own) == len(want) {
			match := true
			for s, r := range want {
				if own[s] != r {
					match = false
					break
				}
			}
			if match {
				return own
			}
		}
		if time.Now().After(deadline) {
			var desc []string
			for _, r := range rs {
				st := r.mgr.Status()
				desc = append(desc, fmt.Sprintf("%s: attached=%v owned=%d assigned=%d pending=%d runners=%d",
					r.id, st.Attached, len(st.Owned), len(st.Assigned), len(st.Pending), st.Runners))
			}
			c.t.Fatalf("not converged after %s: %d/%d shards owned as assigned\n%s", within, countMatch(own, want), len(want), desc)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func countMatch(own map[storage.ShardID]string, want Assignment) int {
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
