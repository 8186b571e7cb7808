package entity

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/s3count"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// requestAllowance is what the reconciliation bounds do not count: the
// time of the S3 requests between the listing's timer and what the tests
// observe (the listing itself; for a task, its read and its claim) and the
// loop's own wake-up, on a machine shared with other test processes.
const requestAllowance = time.Second

// listClock decorates a runner's object store and stamps each listing of
// ready pointers, by prefix (one per shard).
type listClock struct {
	storage.ObjectStore
	log *listLog
}

type listLog struct {
	mu   sync.Mutex
	at   map[string][]time.Time
	done map[string]int // listings answered, by prefix
}

func (l *listClock) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListPage, error) {
	ready := strings.HasPrefix(prefix, task.ReadyPrefix)
	if ready {
		l.log.mu.Lock()
		l.log.at[prefix] = append(l.log.at[prefix], time.Now())
		l.log.mu.Unlock()
	}
	page, err := l.ObjectStore.List(ctx, prefix, opts)
	if ready {
		l.log.mu.Lock()
		l.log.done[prefix]++
		l.log.mu.Unlock()
	}
	return page, err
}

// answered returns how many listings of shard have been answered.
func (l *listLog) answered(shard storage.ShardID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done[task.PointerPrefix(shard)]
}

// of returns the listing times of shard so far.
func (l *listLog) of(shard storage.ShardID) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at[task.PointerPrefix(shard)]...)
}

// idleEnv is an env whose runners reconcile every second after activity,
// backing off to every 4 s, without a retention sweep (every pointer
// listing is a reconciliation), their listings stamped in the log.
func idleEnv(t *testing.T, shards int) (*env, *listLog) {
	e := newEnv(t, shards)
	e.ecfg.ReconcileInterval = time.Second
	e.ecfg.ReconcileMaxInterval = 4 * time.Second
	e.ecfg.TaskRetention = 0
	log := &listLog{at: map[string][]time.Time{}, done: map[string]int{}}
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore { return &listClock{ObjectStore: s, log: log} }
	return e, log
}

// checkGaps checks the gaps between successive listings against the
// waits the pace promises: each at least its wait (never more often),
// at most 1.1 × the wait plus requestAllowance.
func checkGaps(t *testing.T, what string, at []time.Time, waits []time.Duration) {
	t.Helper()
	for i, w := range waits {
		gap := at[i+1].Sub(at[i])
		if gap < w || gap > w+w/10+requestAllowance {
			t.Errorf("%s: listing %d came %s after the one before, want in [%s, %s] (gaps %v)", what, i+1, gap, w, w+w/10+requestAllowance, gaps(at))
		}
	}
}

func gaps(at []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(at); i++ {
		out = append(out, at[i].Sub(at[i-1]).Round(time.Millisecond))
	}
	return out
}

// TestIdleShardReconcileBacksOff: an idle shard's listings come 1 s, 2 s,
// 4 s, 4 s apart (entity.reconcile_interval 1s, entity.reconcile_max_interval
// 4s), never sooner, at most a tenth later (plus the requests' time), as
// stamped on the runner's store; a wake-up brings the next listing to
// within the base interval, and the backoff starts again from it.
func TestIdleShardReconcileBacksOff(t *testing.T) {
	e, log := idleEnv(t, 1)
	shard := storage.ShardID{Group: storage.DefaultGroup, Index: 0}
	e.start("idler", e.standard)
	e.waitOwned(10 * time.Second)
	// The acquisition's listing and four more: 1+2+4+4 s.
	testenv.WaitFor(t, "five listings", 30*time.Second, func() bool { return len(log.of(shard)) >= 5 })
	at := log.of(shard)
	checkGaps(t, "idle", at[:5], []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second})
	// Submit right after a listing: the next one was 4 s away.
	testenv.WaitFor(t, "a sixth listing", 10*time.Second, func() bool { return len(log.of(shard)) >= 6 })
	woken := time.Now()
	tk := e.submit(task.SubmitRequest{Type: "job"})
	if got := e.final(tk.Ref(), 20*time.Second); got.Status != task.Completed {
		t.Fatalf("task %s: %s", tk.Ref(), got.Status)
	}
	testenv.WaitFor(t, "four listings after the wake-up", 30*time.Second, func() bool { return len(log.of(shard)) >= 10 })
	after := log.of(shard)[6:10]
	if d := after[0].Sub(woken); d > time.Second+time.Second/10+requestAllowance {
		t.Errorf("first listing %s after the wake-up, want within the base interval (1.1s) plus %s (gaps %v)", d, requestAllowance, gaps(log.of(shard)))
	}
	// The wake-up and the task's start came before that listing: the wait
	// after it is the base one, then it doubles again.
	checkGaps(t, "after the wake-up", after, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second})
	t.Logf("listing gaps: %v", gaps(log.of(shard)))
}

// dropWaker loses every wake-up, reporting success, as a submitter whose
// etcd write never reached the owner would.
type dropWaker struct{ dropped atomic.Int64 }

func (d *dropWaker) Wake(context.Context, storage.ShardID, string) error {
	d.dropped.Add(1)
	return nil
}

// TestLostWakeupsFoundWithinBound: with every wake-up lost, tasks
// submitted to idle shards (their wait backed off to
// entity.reconcile_max_interval, 4 s) all start within the stated bound:
// 1.1 × the maximum after the submission returns, plus the requests'
// time. Each was found by a listing, counted in
// tenure_tasks_reconcile_found_total.
func TestLostWakeupsFoundWithinBound(t *testing.T) {
	const shards, n = 2, 8
	e, log := idleEnv(t, shards)
	var started sync.Map // task id → time.Time
	node := e.start("finder", func(nd *node, h *Host) {
		e.standard(nd, h)
		if err := h.RegisterFunc("probe", func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
			started.LoadOrStore(tk.ID, time.Now())
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitOwned(10 * time.Second)
	waker := &dropWaker{}
	client, err := task.NewClient(e.tasks, task.ClientConfig{Shards: shards, Waker: waker, Logger: e.logs.logger("client")})
	if err != nil {
		t.Fatal(err)
	}
	// Both shards idle at the maximum: four listings each (1+2+4 s).
	testenv.WaitFor(t, "every shard backed off to the maximum", 30*time.Second, func() bool {
		for i := range shards {
			if len(log.of(storage.ShardID{Group: storage.DefaultGroup, Index: i})) < 4 {
				return false
			}
		}
		return true
	})
	// Right after a listing of shard 0: its next one is the maximum away,
	// the worst case for its tasks.
	s0 := storage.ShardID{Group: storage.DefaultGroup, Index: 0}
	k := len(log.of(s0))
	testenv.WaitFor(t, "a listing of shard 0", 10*time.Second, func() bool { return len(log.of(s0)) > k })
	wakeups := counterValue(t, node, "tenure_tasks_wakeups_total")
	submitted := map[string]time.Time{}
	for range n {
		tk, _, err := client.Submit(ctxFor(t, 10*time.Second), task.SubmitRequest{Type: "probe"})
		if err != nil {
			t.Fatal(err)
		}
		submitted[tk.ID] = time.Now()
	}
	const max = 4 * time.Second
	bound := max + max/10 + requestAllowance
	testenv.WaitFor(t, "every task started", 3*bound, func() bool {
		c := 0
		started.Range(func(any, any) bool { c++; return true })
		return c == n
	})
	for id, sub := range submitted {
		at, _ := started.Load(id)
		if d := at.(time.Time).Sub(sub); d > bound {
			t.Errorf("task %s started %s after its submission, want within 1.1 × %s + %s = %s", id, d, max, requestAllowance, bound)
		} else {
			t.Logf("task %s started %s after its submission", id, d.Round(time.Millisecond))
		}
	}
	if w := counterValue(t, node, "tenure_tasks_wakeups_total"); w != wakeups || waker.dropped.Load() != n {
		t.Fatalf("wake-ups received %v → %v, dropped %d: want none received, %d dropped", wakeups, w, waker.dropped.Load(), n)
	}
	if f := counterValue(t, node, "tenure_tasks_reconcile_found_total"); f < n {
		t.Errorf("tenure_tasks_reconcile_found_total = %v, want ≥ %d", f, n)
	}
}

// TestIdleS3RequestsMatchModel measures an idle runner's S3 requests on the
// wire (s3count) over a window, at short intervals (reconcile 1 s backing
// off to 4 s, sweep every 4 s), against the cost model in BENCHMARKS.md:
// per owned shard, one reconciliation LIST per
// entity.reconcile_max_interval and one sweep LIST per sweep interval,
// each 0–10% later than its interval (jitter); per runner, a HeadBucket
// when its S3 clock sample is older than a minute (none in a window this
// short); nothing else.
func TestIdleS3RequestsMatchModel(t *testing.T) {
	const shards = 4
	const interval = 4 * time.Second // both the reconcile maximum and the sweep interval
	const window = 20 * time.Second
	e := newEnv(t, shards)
	e.ecfg.ReconcileInterval = time.Second
	e.ecfg.ReconcileMaxInterval = interval
	e.ecfg.TaskSweepInterval = interval
	wire, _, _ := e.countOnWireWith(nil)
	n := e.start("idle", e.standard)
	e.waitOwned(10 * time.Second)
	// Backed off: 1+2+4 s of listings after the acquisition's; the first
	// sweep passes come within 2 s (the second reconcile interval).
	testenv.WaitFor(t, "every shard backed off", 30*time.Second, func() bool {
		return counterValue(t, n, "tenure_tasks_reconciles_total") >= 4*shards && counterValue(t, n, "tenure_tasks_sweeps_total") >= shards
	})
	before := wire.Counts()
	reconciles, sweeps := counterValue(t, n, "tenure_tasks_reconciles_total"), counterValue(t, n, "tenure_tasks_sweeps_total")
	start := time.Now()
	testenv.WaitFor(t, "the window to pass", window+time.Second, func() bool { return time.Since(start) >= window })
	got := wire.Counts().Sub(before)
	r := counterValue(t, n, "tenure_tasks_reconciles_total") - reconciles
	s := counterValue(t, n, "tenure_tasks_sweeps_total") - sweeps
	elapsed := time.Since(start)
	// Per shard and kind, between elapsed/(1.1 × interval) − 1 and
	// elapsed/interval + 1 (a listing may fall at either edge).
	lo := shards * (int(elapsed/(interval+interval/10)) - 1)
	hi := shards * (int(elapsed/interval) + 1)
	t.Logf("idle %s, %d shards: on the wire %s; reconciliations %v, sweep passes %v; model per kind [%d, %d] LIST, %.1f expected",
		elapsed.Round(time.Millisecond), shards, got, r, s, lo, hi, float64(shards)*elapsed.Seconds()/(1.05*interval.Seconds()))
	for _, c := range []struct {
		what string
		n    int
	}{{"reconciliations", int(r)}, {"sweep passes", int(s)}} {
		if c.n < lo || c.n > hi {
			t.Errorf("%d %s in %s, want in [%d, %d]", c.n, c.what, elapsed, lo, hi)
		}
	}
	// The wire, read from outside, holds the model's bounds for both
	// kinds together. It matches the runner's own counts up to the
	// listings in flight at the window's two edges, where the wire and the
	// counters are read a moment apart (a reconciliation counts before
	// its LIST, a sweep pass after): at most one per shard and kind at
	// each edge.
	l := got.Requests[s3count.OpList]
	if l < 2*lo || l > 2*hi {
		t.Errorf("%d LIST on the wire in %s, want in [%d, %d]", l, elapsed, 2*lo, 2*hi)
	}
	if d := l - int(r+s); d < -4*shards || d > 4*shards {
		t.Errorf("%d LIST on the wire, want one per reconciliation and sweep pass (%v), give or take the %d that may be in flight at the window's edges", l, r+s, 4*shards)
	}
	for op, c := range got.Requests {
		if op != s3count.OpList && op != s3count.OpHeadBucket && c > 0 {
			t.Errorf("%d %s requests from an idle runner", c, op)
		}
	}
	if h := got.Requests[s3count.OpHeadBucket]; h > int(window/time.Minute)+1 {
		t.Errorf("%d HeadBucket in %s, want at most one per minute", h, window)
	}
}

// TestLeftAlonePointerLetsShardBackOff: a task no runner here handles,
// its wake-up lost, is found by a listing once (counted once in
// tenure_tasks_reconcile_found_total) and then listed again at every
// reconciliation, left pending; that is not activity: the shard backs
// off as if idle, 1 s, 2 s, 4 s after the listing that found it.
func TestLeftAlonePointerLetsShardBackOff(t *testing.T) {
	e, log := idleEnv(t, 1)
	shard := storage.ShardID{Group: storage.DefaultGroup, Index: 0}
	n := e.start("idler", e.standard)
	e.waitOwned(10 * time.Second)
	// The acquisition's listing comes first: it finds every pointer and
	// counts none as lost (a new owner heard no wake-up for them), so a
	// task it already saw would never be counted.
	testenv.WaitFor(t, "the acquisition's listing", 10*time.Second, func() bool { return log.answered(shard) >= 1 })
	client, err := task.NewClient(e.tasks, task.ClientConfig{Shards: 1, Waker: &dropWaker{}, Logger: e.logs.logger("client")})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Submit(ctxFor(t, 10*time.Second), task.SubmitRequest{Type: "nobody-handles-this"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the listing that finds it", 30*time.Second, func() bool {
		return counterValue(t, n, "tenure_tasks_reconcile_found_total") >= 1
	})
	k := len(log.of(shard)) - 1 // the listing that found it
	testenv.WaitFor(t, "three listings more", 30*time.Second, func() bool { return len(log.of(shard)) >= k+4 })
	at := log.of(shard)[k : k+4]
	checkGaps(t, "with a pointer left alone", at, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second})
	if f := counterValue(t, n, "tenure_tasks_reconcile_found_total"); f != 1 {
		t.Errorf("tenure_tasks_reconcile_found_total = %v, want 1: the pointer was found once", f)
	}
	if u := counterValue(t, n, "tenure_tasks_unhandled_total"); u < 3 {
		t.Errorf("tenure_tasks_unhandled_total = %v, want the task looked at again at each listing (≥ 3)", u)
	}
	t.Logf("listing gaps: %v", gaps(log.of(shard)))
}
