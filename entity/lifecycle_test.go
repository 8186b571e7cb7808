package entity

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"

	"github.com/tenurehq/tenure/internal/testenv"
)

// TestRetriesHonourAvailableAt: failed attempts are retried with backoff,
// never claimed before their available_at (S3 time); a permanently failing
// task ends failed after max_attempts with its error history; replay runs
// it again; a permanent error fails at once; a panic is a failed attempt.
func TestRetriesHonourAvailableAt(t *testing.T) {
	e := newEnv(t, 2)
	e.start("solo", e.standard)
	e.waitOwned(10 * time.Second)

	flaky := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Fail: 2}), MaxAttempts: 5})
	got := e.final(flaky.Ref(), 30*time.Second)
	if got.Status != task.Completed || got.Attempt != 3 {
		t.Fatalf("flaky task: %s after %d attempts (%s)", got.Status, got.Attempt, got.Error)
	}
	// Every claim after a failure comes at or after the available_at that
	// failure set, both in S3 time.
	var retryAt time.Time
	retries := 0
	for _, h := range got.History {
		switch h.Event {
		case task.EventRetrying:
			retryAt = parseRetryAt(t, h.Detail)
			retries++
		case task.EventClaimed:
			if !retryAt.IsZero() && h.At.Before(retryAt) {
				t.Fatalf("claimed at %v, before the retry's available_at %v", h.At, retryAt)
			}
		}
	}
	if retries != 2 {
		t.Fatalf("%d retries recorded, want 2: %+v", retries, got.History)
	}

	doomed := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Fail: 100}), MaxAttempts: 3})
	got = e.final(doomed.Ref(), 30*time.Second)
	if got.Status != task.Failed || got.Attempt != 3 || !strings.Contains(got.Error, "flaky") {
		t.Fatalf("doomed task: %s after %d attempts, error %q", got.Status, got.Attempt, got.Error)
	}
	failures := 0
	for _, h := range got.History {
		if strings.Contains(h.Detail, "flaky") {
			failures++
		}
	}
	if failures != 3 {
		t.Fatalf("error history holds %d failures, want 3: %+v", failures, got.History)
	}
	// Replay: the task runs again (and fails again, the same 3 attempts).
	before := e.rec.Starts()
	if _, err := e.client.Replay(ctxFor(t, 10*time.Second), doomed.Ref()); err != nil {
		t.Fatal(err)
	}
	got = e.final(doomed.Ref(), 30*time.Second)
	if got.Status != task.Failed || e.rec.Starts()-before != 3 {
		t.Fatalf("replay: %s, %d more runs", got.Status, e.rec.Starts()-before)
	}

	perm := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Perm: true}), MaxAttempts: 5})
	if got := e.final(perm.Ref(), 20*time.Second); got.Status != task.Failed || got.Attempt != 1 {
		t.Fatalf("permanent failure: %s after %d attempts", got.Status, got.Attempt)
	}
	boom := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Panic: true}), MaxAttempts: 2})
	got = e.final(boom.Ref(), 20*time.Second)
	if got.Status != task.Failed || got.Attempt != 2 || !strings.Contains(got.Error, "panicked") {
		t.Fatalf("panicking task: %s after %d attempts, error %q", got.Status, got.Attempt, got.Error)
	}
}

// parseRetryAt reads the available_at a retry entry names.
func parseRetryAt(t *testing.T, detail string) time.Time {
	t.Helper()
	i := strings.Index(detail, "retry at ")
	if i < 0 {
		t.Fatalf("retry history entry %q names no time", detail)
	}
	s := detail[i+len("retry at "):]
	if j := strings.IndexByte(s, ' '); j >= 0 {
		s = strings.TrimSuffix(s[:j], ":")
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("retry history entry %q: %v", detail, err)
	}
	return at
}

// TestCancelRunning: cancelling a running task stops its handler through
// its context, and the task ends cancelled; a pending one is cancelled at
// once.
func TestCancelRunning(t *testing.T) {
	e := newEnv(t, 2)
	e.start("solo", e.standard)
	e.waitOwned(10 * time.Second)
	tk := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Block: true})})
	testenv.WaitFor(t, "the handler to start", 10*time.Second, func() bool { return e.rec.Starts() == 1 })
	asked := time.Now()
	if _, err := e.client.Cancel(ctxFor(t, 10*time.Second), tk.Ref()); err != nil {
		t.Fatal(err)
	}
	got := e.final(tk.Ref(), 10*time.Second)
	run := e.rec.All()[0]
	if got.Status != task.Cancelled || run.CancelledAt.IsZero() {
		t.Fatalf("task %s; handler cancelled at %v", got.Status, run.CancelledAt)
	}
	t.Logf("handler stopped %s after the cancel request", run.CancelledAt.Sub(asked))
	later := e.submit(task.SubmitRequest{Type: "job", Delay: time.Hour})
	if got, err := e.client.Cancel(ctxFor(t, 10*time.Second), later.Ref()); err != nil || got.Status != task.Cancelled {
		t.Fatalf("cancel of a pending task: %v %v", got, err)
	}
}

// TestBadTasksDoNotStopTheShard: a corrupt task object is moved to failed
// with its bytes kept, a task of an unknown type stays pending and is
// counted, an oversized input is refused at submit; the shard's other tasks
// run.
func TestBadTasksDoNotStopTheShard(t *testing.T) {
	e := newEnv(t, 1)
	n := e.start("solo", e.standard)
	e.waitOwned(10 * time.Second)
	ctx := ctxFor(t, 30*time.Second)

	// A task object that is not JSON, with its pointer.
	good := e.submit(task.SubmitRequest{Type: "job", Delay: time.Hour}) // a template for keys
	badID := "corrupt-1"
	badKey := task.TaskKey(good.Shard, badID)
	if _, err := e.tasks.Objects().Put(ctx, badKey, []byte(`{"id":"corrupt-1","status":`)); err != nil {
		t.Fatal(err)
	}
	ptr := task.PointerKey(good.Shard, time.Now().Add(-time.Minute), badID, "job", "")
	if _, err := e.tasks.Objects().Put(ctx, ptr, nil); err != nil {
		t.Fatal(err)
	}
	if err := n.rs.Wake(ctx, good.Shard, ptr); err != nil {
		t.Fatal(err)
	}
	unknown := e.submit(task.SubmitRequest{Type: "nobody-handles-this"})
	after := e.submit(task.SubmitRequest{Type: "job"})
	if got := e.final(after.Ref(), 20*time.Second); got.Status != task.Completed {
		t.Fatalf("a task behind the bad ones: %s", got.Status)
	}
	testenv.WaitFor(t, "the corrupt task to be failed", 20*time.Second, func() bool {
		got, err := e.client.Get(ctx, task.Ref(good.Shard, badID))
		return err == nil && got.Status == task.Failed
	})
	bad, _ := e.client.Get(ctx, task.Ref(good.Shard, badID))
	if !strings.Contains(string(bad.CorruptBytes()), `"status":`) || !strings.Contains(bad.Error, "corrupt") {
		t.Fatalf("corrupt task kept %q, error %q", bad.CorruptBytes(), bad.Error)
	}
	if got, _ := e.client.Get(ctx, unknown.Ref()); got.Status != task.Pending {
		t.Fatalf("unknown-type task: %s", got.Status)
	}
	if v := counterValue(t, n, "tenure_tasks_unhandled_total"); v < 1 {
		t.Fatalf("unhandled counter %v", v)
	}
	if got := n.host.UnhandledTypes(); !slices.Equal(got, []string{"nobody-handles-this"}) {
		t.Fatalf("unhandled types %v, want the unknown task's", got)
	}
	if v := counterValue(t, n, "tenure_tasks_corrupt_total"); v != 1 {
		t.Fatalf("corrupt counter %v", v)
	}
	big := make([]byte, e.tasks.Options().MaxInputSize+10)
	for i := range big {
		big[i] = 'x'
	}
	bigInput, _ := json.Marshal(string(big))
	if _, _, err := e.client.Submit(ctx, task.SubmitRequest{Type: "job", Input: bigInput}); err == nil || !strings.Contains(err.Error(), "input") {
		t.Fatalf("oversized input: %v", err)
	}
}

// lifecycleEntity counts OnStart/OnStop and keeps state.
type lifecycleEntity struct {
	id      string
	n       int
	starts  *atomic.Int64
	stopped *sync.Map
}

func (l *lifecycleEntity) Handle(_ context.Context, t *task.Task) (json.RawMessage, error) {
	l.n++
	return json.RawMessage(`{"n":` + string(rune('0'+l.n)) + `}`), nil
}
func (l *lifecycleEntity) OnStart(context.Context) error { l.starts.Add(1); return nil }
func (l *lifecycleEntity) OnStop(_ context.Context, r StopReason) {
	v, _ := l.stopped.LoadOrStore(l.id, &stopLog{})
	v.(*stopLog).add(r)
}

// stopsOf returns the stop reasons recorded for an entity id.
func stopsOf(m *sync.Map, id string) []StopReason {
	v, ok := m.Load(id)
	if !ok {
		return nil
	}
	l := v.(*stopLog)
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]StopReason(nil), l.reasons...)
}

// lifeEnv starts one runner hosting the "life" entity type.
func lifeEnv(t *testing.T, maxIdle time.Duration, maxResident int) (*env, *atomic.Int64, *sync.Map) {
	e := newEnv(t, 1)
	e.ecfg.MaxIdle = maxIdle
	e.ecfg.MaxResident = maxResident
	var starts atomic.Int64
	var stopped sync.Map
	e.start("solo", func(n *node, h *Host) {
		if err := h.Register("life", func(id string) (Entity, error) {
			return &lifecycleEntity{id: id, starts: &starts, stopped: &stopped}, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitOwned(10 * time.Second)
	return e, &starts, &stopped
}

// TestEntityKeepsStateAndPassivatesWhenIdle: an instance keeps its state
// between tasks, starts once, and is passivated after MaxIdle.
func TestEntityKeepsStateAndPassivatesWhenIdle(t *testing.T) {
	e, starts, stopped := lifeEnv(t, 500*time.Millisecond, 100)
	var last *task.Task
	for i := 0; i < 3; i++ {
		last = e.submit(task.SubmitRequest{Type: "life", Entity: "a"})
	}
	if got := e.final(last.Ref(), 10*time.Second); string(got.Result) != `{"n":3}` {
		t.Fatalf("state not kept: %s", got.Result)
	}
	if starts.Load() != 1 {
		t.Fatalf("OnStart ran %d times for one instance", starts.Load())
	}
	testenv.WaitFor(t, "idle passivation", 5*time.Second, func() bool {
		r := stopsOf(stopped, "a")
		return len(r) == 1 && r[0] == StopIdle
	})
	// A new task after passivation starts a new instance with fresh state.
	if got := e.final(e.submit(task.SubmitRequest{Type: "life", Entity: "a"}).Ref(), 10*time.Second); string(got.Result) != `{"n":1}` || starts.Load() != 2 {
		t.Fatalf("after passivation: result %s, %d starts", got.Result, starts.Load())
	}
}

// TestEntityEvictionLRU: beyond MaxResident the least recently used
// instance is passivated.
func TestEntityEvictionLRU(t *testing.T) {
	e, _, stopped := lifeEnv(t, time.Hour, 2)
	for _, id := range []string{"x", "y", "z"} {
		e.final(e.submit(task.SubmitRequest{Type: "life", Entity: id}).Ref(), 10*time.Second)
	}
	testenv.WaitFor(t, "eviction of x", 5*time.Second, func() bool {
		r := stopsOf(stopped, "x")
		return len(r) == 1 && r[0] == StopEvicted
	})
	if len(stopsOf(stopped, "y")) != 0 || len(stopsOf(stopped, "z")) != 0 {
		t.Fatalf("y or z stopped: %v %v", stopsOf(stopped, "y"), stopsOf(stopped, "z"))
	}
}

// TestConcurrencyLimits: no more handlers run at once than the runner's
// limit allows.
func TestConcurrencyLimits(t *testing.T) {
	e := newEnv(t, 4)
	e.ecfg.MaxConcurrentPerRunner = 3
	var cur, peak atomic.Int64
	e.start("solo", func(n *node, h *Host) {
		if err := h.RegisterFunc("slow", func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
			c := cur.Add(1)
			for {
				p := peak.Load()
				if c <= p || peak.CompareAndSwap(p, c) {
					break
				}
			}
			time.Sleep(50 * time.Millisecond) // the work being limited
			cur.Add(-1)
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitOwned(10 * time.Second)
	var refs []string
	for i := 0; i < 20; i++ {
		refs = append(refs, e.submit(task.SubmitRequest{Type: "slow"}).Ref())
	}
	for _, ref := range refs {
		e.final(ref, 30*time.Second)
	}
	if p := peak.Load(); p > 3 || p < 2 {
		t.Fatalf("peak concurrency %d with a limit of 3", p)
	}
}
