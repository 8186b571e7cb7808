package entity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/storage"
)

// singletonAudit is the outside view of a singleton's runs: every Run
// reports its start and end here, and a start while another run is live
// is a violation.
type singletonAudit struct {
	mu         sync.Mutex
	live       map[string]time.Time // runner → start of its live run
	runs       []singletonRun
	violations []string
}

type singletonRun struct {
	runner     string
	start, end time.Time // end zero while live
}

func newSingletonAudit() *singletonAudit { return &singletonAudit{live: map[string]time.Time{}} }

func (a *singletonAudit) begin(runner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for other := range a.live {
		a.violations = append(a.violations, fmt.Sprintf("%s started at %s while %s ran", runner, now.Format(time.StampMicro), other))
	}
	a.live[runner] = now
	a.runs = append(a.runs, singletonRun{runner: runner, start: now})
}

func (a *singletonAudit) end(runner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.live, runner)
	for i := len(a.runs) - 1; i >= 0; i-- {
		if a.runs[i].runner == runner && a.runs[i].end.IsZero() {
			a.runs[i].end = time.Now()
			return
		}
	}
}

// current returns the runner whose run is live, "" if none (or several).
func (a *singletonAudit) current() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.live) != 1 {
		return ""
	}
	for r := range a.live {
		return r
	}
	return ""
}

func (a *singletonAudit) snapshot() ([]singletonRun, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]singletonRun(nil), a.runs...), append([]string(nil), a.violations...)
}

// awaitOther waits for a live run on a runner other than old, started
// after since; it returns that run.
func (a *singletonAudit) awaitOther(t *testing.T, old string, since time.Time, within time.Duration) singletonRun {
	t.Helper()
	var got singletonRun
	testenv.WaitFor(t, "the singleton running on another runner", within, func() bool {
		runs, _ := a.snapshot()
		for _, r := range runs {
			if r.runner != old && r.start.After(since) && r.end.IsZero() {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

// auditedSingleton is a singleton that reports its runs and blocks until
// its context ends.
type auditedSingleton struct {
	runner string
	audit  *singletonAudit
}

func (s *auditedSingleton) Run(ctx context.Context) error {
	s.audit.begin(s.runner)
	defer s.audit.end(s.runner)
	<-ctx.Done()
	return ctx.Err()
}

// singletonEnv starts an env whose hosts place singletons with the env's
// task client and register the audited singleton "leader".
func singletonEnv(t *testing.T, mode detachment.Mode) (*env, *singletonAudit, registerFunc) {
	e := newEnv(t, 8)
	e.scfg.Detachment.Mode = mode
	e.hostOpts = func(*node) []Option { return []Option{WithTaskClient(e.client)} }
	audit := newSingletonAudit()
	reg := func(n *node, h *Host) {
		if err := h.RegisterSingleton("leader", func() (Singleton, error) {
			return &auditedSingleton{runner: n.id, audit: audit}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return e, audit, reg
}

func (e *env) node(id string) *node {
	for _, n := range e.members() {
		if n.id == id {
			return n
		}
	}
	e.t.Fatalf("no running node %s", id)
	return nil
}

// TestSingletonOneInstanceAcrossHandoffAndCrash: a singleton runs on
// exactly one of three runners, on the holder of its shard (its status
// says so); a drain of that runner moves it after its Run returned; a
// crash of the next holder moves it once etcd has revoked its lease
// (within harness.RevokeBound of the crash) and the watches have moved the
// shard (within harness.WatchBound of that, no timer that could move it
// being due: watchOnly), and never do two runs overlap (the runs' own
// reports, taken in one process).
func TestSingletonOneInstanceAcrossHandoffAndCrash(t *testing.T) {
	e, audit, reg := singletonEnv(t, detachment.ModeEnforce)
	e.watchOnly()
	for _, id := range []string{"r1", "r2", "r3"} {
		e.start(id, reg)
	}
	e.waitSettled(30 * time.Second)
	locks := e.watchLocks()
	shard := SingletonShard(storage.DefaultGroup, e.Meta.Shards, "leader")
	var first string
	testenv.WaitFor(t, "the singleton running", 20*time.Second, func() bool { first = audit.current(); return first != "" })
	holder := e.node(first)
	owns := false
	for _, o := range holder.mgr.Owned() {
		owns = owns || o.Shard == shard
	}
	if !owns {
		t.Fatalf("the singleton runs on %s, which does not hold its shard %s", first, shard)
	}
	if st := holder.host.Singletons(); len(st) != 1 || st[0].Type != "leader" || !st[0].Running || st[0].Shard != shard.String() {
		t.Fatalf("status on the holder: %+v", st)
	}
	for _, n := range e.members() {
		if n.id != first && len(n.host.Singletons()) != 0 {
			t.Fatalf("%s reports singletons it does not run: %+v", n.id, n.host.Singletons())
		}
	}

	// Planned handoff: drain the holder.
	drained := time.Now()
	holder.stop()
	second := audit.awaitOther(t, first, drained, 20*time.Second)
	t.Logf("drain of %s: singleton on %s %v after the drain began", first, second.runner, second.start.Sub(drained).Round(time.Millisecond))

	// Crash of the next holder: cut from etcd, then stopped.
	crashed := time.Now()
	e.node(second.runner).kill()
	ttl := e.scfg.LeaseTTL
	third := audit.awaitOther(t, second.runner, crashed, harness.RevokeBound(ttl)+harness.WatchBound)
	runs, violations := audit.snapshot()
	var oldEnd time.Time
	for _, r := range runs {
		if r.runner == second.runner && !r.end.IsZero() {
			oldEnd = r.end
		}
	}
	gap := third.start.Sub(oldEnd)
	revoked, _ := locks.RevokedAt(second.runner, []storage.ShardID{shard}, crashed)
	t.Logf("crash of %s: singleton on %s after a gap of %v (lease TTL %v, revoked %v after the crash)", second.runner, third.runner,
		gap.Round(time.Millisecond), ttl, revoked.Sub(crashed).Round(time.Millisecond))
	switch {
	case revoked.IsZero():
		t.Errorf("the lock watch saw no release of %s's lock of %s after the crash", second.runner, shard)
	case revoked.Sub(crashed) > harness.RevokeBound(ttl):
		t.Errorf("%s's lease revoked %v after the crash, want within %v (its TTL, etcd's check, the watch)", second.runner,
			revoked.Sub(crashed), harness.RevokeBound(ttl))
	case third.start.Sub(revoked) > harness.WatchBound:
		t.Errorf("the singleton started on %s %v after %s's lease was revoked, want within %v (moved by the watches)",
			third.runner, third.start.Sub(revoked), second.runner, harness.WatchBound)
	}
	if len(violations) > 0 {
		t.Fatalf("two singleton runs at once: %v", violations)
	}
}

// TestSingletonStopsOnPartition: a partitioned holder stops its singleton
// before a successor can start it, in enforce mode (the shard is dropped)
// and in observe and off mode (the shard is kept, the detachment decision
// still bounds Run); healed, the cluster runs it once again.
func TestSingletonStopsOnPartition(t *testing.T) {
	for _, mode := range []detachment.Mode{detachment.ModeEnforce, detachment.ModeObserve, detachment.ModeOff} {
		t.Run(string(mode), func(t *testing.T) {
			e, audit, reg := singletonEnv(t, mode)
			for _, id := range []string{"r1", "r2"} {
				e.start(id, reg)
			}
			e.waitSettled(30 * time.Second)
			var first string
			testenv.WaitFor(t, "the singleton running", 20*time.Second, func() bool { first = audit.current(); return first != "" })
			cut := time.Now()
			n := e.node(first)
			n.proxy.SetMode(testenv.Blackhole)
			next := audit.awaitOther(t, first, cut, 30*time.Second)
			t.Logf("%s partitioned: singleton on %s after %v", first, next.runner, next.start.Sub(cut).Round(time.Millisecond))
			n.proxy.SetMode(testenv.Pass)
			e.waitOwned(30 * time.Second)
			testenv.WaitFor(t, "one singleton run after healing", 20*time.Second, func() bool { return audit.current() != "" })
			if _, violations := audit.snapshot(); len(violations) > 0 {
				t.Fatalf("two singleton runs at once: %v", violations)
			}
		})
	}
}

// flakySingleton fails its first run, panics in its second and then runs
// until cancelled.
type flakySingleton struct {
	runs *int
	mu   *sync.Mutex
	live chan struct{}
}

func (s *flakySingleton) Run(ctx context.Context) error {
	s.mu.Lock()
	*s.runs++
	n := *s.runs
	s.mu.Unlock()
	switch n {
	case 1:
		return errors.New("boom")
	case 2:
		panic("kaboom")
	}
	close(s.live)
	<-ctx.Done()
	return nil
}

// TestSingletonRestarts: a Run that fails or panics is restarted (with a
// backoff) and counted; the runner carries on.
func TestSingletonRestarts(t *testing.T) {
	e := newEnv(t, 2)
	e.hostOpts = func(*node) []Option { return []Option{WithTaskClient(e.client)} }
	var mu sync.Mutex
	runs := 0
	live := make(chan struct{})
	n := e.start("r1", func(_ *node, h *Host) {
		if err := h.RegisterSingleton("flaky", func() (Singleton, error) {
			return &flakySingleton{runs: &runs, mu: &mu, live: live}, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	select {
	case <-live:
	case <-ctxFor(t, 30*time.Second).Done():
		t.Fatal("the singleton did not reach its third run")
	}
	st := n.host.Singletons()
	if len(st) != 1 || st[0].Restarts != 2 || !st[0].Running {
		t.Fatalf("status: %+v, want running after 2 restarts", st)
	}
	if got := testutil.ToFloat64(n.host.smetrics.restarts.WithLabelValues("flaky", "failed")); got != 1 {
		t.Fatalf("failed restarts = %v, want 1", got)
	}
	if got := testutil.ToFloat64(n.host.smetrics.restarts.WithLabelValues("flaky", "panicked")); got != 1 {
		t.Fatalf("panicked restarts = %v, want 1", got)
	}
	if got := testutil.ToFloat64(n.host.smetrics.running.WithLabelValues("flaky")); got != 1 {
		t.Fatalf("running gauge = %v, want 1", got)
	}
}

// TestSingletonRegistration: singleton types need a task client to be
// placed, are refused twice, and go through Types like other types.
func TestSingletonRegistration(t *testing.T) {
	e := newEnv(t, 2)
	rs, err := e.Store(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	f := func() (Singleton, error) { return &auditedSingleton{audit: newSingletonAudit()}, nil }
	h, err := NewHost(e.newTaskStore(), rs, "x", testEntityConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	if err := h.RegisterSingleton("s", f); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("register without a task client: %v, want ErrInvalidConfig", err)
	}
	var types Types
	if err := types.RegisterSingleton("s", f); err != nil {
		t.Fatal(err)
	}
	if err := types.RegisterSingleton("s", f); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("registered twice: %v", err)
	}
	if err := types.RegisterSingleton("bad name", f); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad name: %v", err)
	}
	if err := types.Collect(func(h *Host) error { return h.RegisterSingleton("t", f) }); err != nil {
		t.Fatalf("collect: %v", err)
	}
	if got := types.Singletons(); len(got) != 2 || got[0] != "s" || got[1] != "t" {
		t.Fatalf("singletons %v", got)
	}
	if _, err := NewHost(e.newTaskStore(), rs, "y", testEntityConfig(), WithTypes(&types)); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("host with singleton types and no task client: %v", err)
	}
	h2, err := NewHost(e.newTaskStore(), rs, "z", testEntityConfig(), WithTypes(&types), WithTaskClient(e.client))
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close(context.Background())
	if got := h2.SingletonTypes(); len(got) != 2 {
		t.Fatalf("host singleton types %v", got)
	}
	if s := SingletonShard(storage.DefaultGroup, 8, "leader"); s != task.ShardOf(storage.DefaultGroup, 8, "leader", SingletonID, "") {
		t.Fatalf("singleton shard %v", s)
	}
}
