package task

// This file is past the ~500-line mark on purpose: it is the pure task
// transitions' tests (refusals, every allowed transition, failure, retry
// schedule, backoff, history trimming, renewal, claim enforcement) over
// one set of fixture tasks in every state (pendingTask … cancelled) at
// the top, which the tables refer to by name; split, the tables would be
// read away from the states they start from.

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Fixtures: a task in each state, built with the transitions themselves.

func pendingTask() *Task {
	return &Task{ID: "t1", Type: "email", Shard: storage.ShardID{Group: "default", Index: 3},
		Status: Pending, MaxAttempts: 3, Timeout: Duration(time.Minute),
		Retry:       RetryPolicy{Initial: Duration(time.Second), Max: Duration(time.Minute), Multiplier: 2},
		AvailableAt: t0, CreatedAt: t0, Rev: 1, History: []Transition{{At: t0, Event: EventSubmitted}}}
}

func must(t *Task, err error) *Task {
	if err != nil {
		panic(err) // a broken fixture is a bug in the test
	}
	return t
}

func notDue() *Task { t := pendingTask(); t.AvailableAt = t0.Add(time.Hour); return t }
func runningA() *Task {
	t := pendingTask()
	return must(t, t.ClaimFor(t0, runnerA))
}
func expiredA() *Task { // runner A's lease ran out at t0+30s
	return runningA()
}
func cancelReq() *Task {
	t := runningA()
	return must(t, t.RequestCancel(t0))
}
func exhausted() *Task { // running on its last attempt
	t := runningA()
	t.Attempt = t.MaxAttempts
	return t
}
func completed() *Task {
	t := runningA()
	return must(t, t.Complete(t0, json.RawMessage(`1`)))
}
func failed() *Task {
	t := runningA()
	t.Fail(t0, errors.New("boom"), true)
	return t
}
func cancelled() *Task {
	t := pendingTask()
	return must(t, t.RequestCancel(t0))
}

var later = t0.Add(time.Minute) // after runner A's lease

func TestTransitionRefusals(t *testing.T) {
	older := ClaimInfo{RunnerID: "old", Epoch: 9, LeaseID: 1, Lease: time.Second}
	cases := []struct {
		name string
		task func() *Task
		op   func(*Task) error
		want error
		due  time.Time
	}{
		{"claim not due", notDue, func(t *Task) error { return t.ClaimFor(t0, runnerA) }, ErrNotDue, t0.Add(time.Hour)},
		{"claim completed", completed, func(t *Task) error { return t.ClaimFor(later, runnerA) }, ErrTerminal, time.Time{}},
		{"claim failed", failed, func(t *Task) error { return t.ClaimFor(later, runnerA) }, ErrTerminal, time.Time{}},
		{"claim cancelled", cancelled, func(t *Task) error { return t.ClaimFor(later, runnerA) }, ErrTerminal, time.Time{}},
		{"claim cancel requested", cancelReq, func(t *Task) error { return t.ClaimFor(later, runnerB) }, ErrCancelRequested, time.Time{}},
		{"claim live lease", runningA, func(t *Task) error { return t.ClaimFor(t0.Add(30*time.Second), runnerB) }, ErrClaimed, t0.Add(30 * time.Second)},
		{"claim expired lease, older epoch", expiredA, func(t *Task) error { return t.ClaimFor(later, older) }, ErrStaleEpoch, time.Time{}},
		{"claim exhausted", exhausted, func(t *Task) error { return t.ClaimFor(later, runnerB) }, ErrAttemptsExhausted, time.Time{}},
		{"claim without runner", pendingTask, func(t *Task) error { return t.ClaimFor(t0, ClaimInfo{Lease: time.Second}) }, ErrInvalid, time.Time{}},
		{"claim without lease", pendingTask, func(t *Task) error { return t.ClaimFor(t0, ClaimInfo{RunnerID: "r"}) }, ErrInvalid, time.Time{}},

		{"takeover pending", pendingTask, func(t *Task) error { return t.TakeOver(t0, runnerB, "x") }, ErrInvalidTransition, time.Time{}},
		{"takeover own claim", runningA, func(t *Task) error { return t.TakeOver(t0, runnerA, "x") }, ErrInvalidTransition, time.Time{}},
		{"takeover older epoch", runningA, func(t *Task) error { return t.TakeOver(t0, older, "x") }, ErrStaleEpoch, time.Time{}},
		{"takeover completed", completed, func(t *Task) error { return t.TakeOver(t0, runnerB, "x") }, ErrTerminal, time.Time{}},
		{"takeover cancel requested", cancelReq, func(t *Task) error { return t.TakeOver(t0, runnerB, "x") }, ErrCancelRequested, time.Time{}},
		{"takeover exhausted", exhausted, func(t *Task) error { return t.TakeOver(t0, runnerB, "x") }, ErrAttemptsExhausted, time.Time{}},

		{"renew pending", pendingTask, func(t *Task) error { return t.Renew(t0, time.Second) }, ErrInvalidTransition, time.Time{}},
		{"renew completed", completed, func(t *Task) error { return t.Renew(t0, time.Second) }, ErrTerminal, time.Time{}},
		{"renew zero lease", runningA, func(t *Task) error { return t.Renew(t0, 0) }, ErrInvalid, time.Time{}},

		{"complete pending", pendingTask, func(t *Task) error { return t.Complete(t0, nil) }, ErrInvalidTransition, time.Time{}},
		{"complete failed", failed, func(t *Task) error { return t.Complete(t0, nil) }, ErrTerminal, time.Time{}},
		{"complete invalid result", runningA, func(t *Task) error { return t.Complete(t0, json.RawMessage(`{`)) }, ErrInvalid, time.Time{}},

		{"requeue pending", pendingTask, func(t *Task) error { return t.Requeue(t0, "x") }, ErrInvalidTransition, time.Time{}},
		{"requeue cancelled", cancelled, func(t *Task) error { return t.Requeue(t0, "x") }, ErrTerminal, time.Time{}},

		{"cancel completed", completed, func(t *Task) error { return t.RequestCancel(t0) }, ErrTerminal, time.Time{}},
		{"cancel failed", failed, func(t *Task) error { return t.RequestCancel(t0) }, ErrTerminal, time.Time{}},
		{"cancel cancelled", cancelled, func(t *Task) error { return t.RequestCancel(t0) }, ErrTerminal, time.Time{}},

		{"finish cancel not requested", runningA, func(t *Task) error { return t.FinishCancel(t0) }, ErrInvalidTransition, time.Time{}},
		{"finish cancel cancelled", cancelled, func(t *Task) error { return t.FinishCancel(t0) }, ErrTerminal, time.Time{}},

		{"replay completed", completed, func(t *Task) error { return t.Replay(t0) }, ErrInvalidTransition, time.Time{}},
		{"replay pending", pendingTask, func(t *Task) error { return t.Replay(t0) }, ErrInvalidTransition, time.Time{}},
		{"replay running", runningA, func(t *Task) error { return t.Replay(t0) }, ErrInvalidTransition, time.Time{}},
		{"replay corrupt", func() *Task { t := failed(); t.Corrupt = "x"; return t }, func(t *Task) error { return t.Replay(t0) }, ErrInvalidTransition, time.Time{}},
		{"mark corrupt of a sound task", failed, func(t *Task) error { return t.MarkCorrupt(t0, errors.New("x")) }, ErrInvalidTransition, time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := c.task()
			before := tk.Clone()
			err := c.op(tk)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			var te *TransitionError
			if errors.As(err, &te) {
				if te.Ref != "default/3/t1" || te.Status != before.Status || !te.Due.Equal(c.due) {
					t.Fatalf("TransitionError %+v: want ref default/3/t1, status %s, due %s", te, before.Status, c.due)
				}
				if !strings.Contains(err.Error(), "default/3/t1") {
					t.Fatalf("error %q does not name the task", err)
				}
			} else if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err %v is neither a *TransitionError nor a validation error", err)
			}
			if !reflect.DeepEqual(tk, before) {
				t.Fatalf("a refused transition changed the task:\n got %+v\nwant %+v", tk, before)
			}
		})
	}
}

func lastEvent(t *Task) Transition { return t.History[len(t.History)-1] }

func TestTransitions(t *testing.T) {
	now := t0.Add(5 * time.Second)
	cases := []struct {
		name  string
		task  func() *Task
		op    func(*Task) error
		event string // the history entry appended
		check func(t *testing.T, before, after *Task)
	}{
		{"claim pending", pendingTask, func(t *Task) error { return t.ClaimFor(now, runnerA) }, EventClaimed,
			func(t *testing.T, b, a *Task) {
				want := &Claim{RunnerID: "runner-a", Epoch: 10, LeaseID: 100, LeaseExpiresAt: now.Add(30 * time.Second), ClaimedAt: now}
				if a.Status != Running || a.Attempt != 1 || !reflect.DeepEqual(a.Claim, want) || !a.HeldBy(runnerA) || a.HeldBy(runnerB) {
					t.Fatalf("status %s attempt %d claim %+v", a.Status, a.Attempt, a.Claim)
				}
			}},
		{"claim due exactly now", func() *Task { t := pendingTask(); t.AvailableAt = now; return t }, func(t *Task) error { return t.ClaimFor(now, runnerA) }, EventClaimed, nil},
		{"claim over an expired lease", expiredA, func(t *Task) error { return t.ClaimFor(later, runnerB) }, EventClaimed,
			func(t *testing.T, b, a *Task) {
				if a.Attempt != 2 || a.Claim.RunnerID != "runner-b" || !strings.Contains(lastEvent(a).Detail, "runner-a") {
					t.Fatalf("attempt %d claim %+v history %+v", a.Attempt, a.Claim, lastEvent(a))
				}
			}},
		{"takeover by a newer epoch", runningA, func(t *Task) error { return t.TakeOver(now, runnerB, "older epoch") }, EventTakenOver,
			func(t *testing.T, b, a *Task) {
				ev := lastEvent(a)
				if a.Attempt != 2 || !a.HeldBy(runnerB) || !strings.HasPrefix(ev.Detail, "taken over: older epoch") || ev.Runner != "runner-b" {
					t.Fatalf("attempt %d claim %+v history %+v", a.Attempt, a.Claim, ev)
				}
				if !a.Claim.LeaseExpiresAt.Equal(now.Add(30 * time.Second)) {
					t.Fatalf("lease until %s", a.Claim.LeaseExpiresAt)
				}
			}},
		{"takeover, same epoch, other runner", runningA, func(t *Task) error {
			return t.TakeOver(now, ClaimInfo{RunnerID: "c", Epoch: 10, LeaseID: 7, Lease: time.Second}, "detached")
		}, EventTakenOver, nil},
		{"renew", runningA, func(t *Task) error { return t.Renew(now, time.Minute) }, EventRenewed,
			func(t *testing.T, b, a *Task) {
				if !a.Claim.LeaseExpiresAt.Equal(now.Add(time.Minute)) || a.Attempt != b.Attempt || a.Status != Running {
					t.Fatalf("lease until %s", a.Claim.LeaseExpiresAt)
				}
			}},
		{"complete", runningA, func(t *Task) error { t.Error = "earlier"; return t.Complete(now, json.RawMessage(`{"ok":true}`)) }, EventCompleted,
			func(t *testing.T, b, a *Task) {
				if a.Status != Completed || string(a.Result) != `{"ok":true}` || a.Claim != nil || a.Error != "" {
					t.Fatalf("status %s result %s claim %+v error %q", a.Status, a.Result, a.Claim, a.Error)
				}
			}},
		{"requeue", runningA, func(t *Task) error { return t.Requeue(now, "handoff") }, EventRequeued,
			func(t *testing.T, b, a *Task) {
				if a.Status != Pending || a.Attempt != 0 || a.Claim != nil || !a.AvailableAt.Equal(b.AvailableAt) || a.PointerKey() != b.PointerKey() {
					t.Fatalf("status %s attempt %d claim %+v available %s", a.Status, a.Attempt, a.Claim, a.AvailableAt)
				}
				if lastEvent(a).Detail != "handoff" || lastEvent(a).Runner != "runner-a" {
					t.Fatalf("history %+v", lastEvent(a))
				}
			}},
		{"cancel pending", pendingTask, func(t *Task) error { return t.RequestCancel(now) }, EventCancelled,
			func(t *testing.T, b, a *Task) {
				if a.Status != Cancelled {
					t.Fatalf("status %s", a.Status)
				}
			}},
		{"cancel running", runningA, func(t *Task) error { return t.RequestCancel(now) }, EventCancelRequested,
			func(t *testing.T, b, a *Task) {
				if a.Status != Running || !a.CancelRequested || !a.HeldBy(runnerA) {
					t.Fatalf("status %s requested %v", a.Status, a.CancelRequested)
				}
			}},
		{"cancel running, already requested", cancelReq, func(t *Task) error { return t.RequestCancel(now) }, "",
			func(t *testing.T, b, a *Task) {
				if !reflect.DeepEqual(a, b) {
					t.Fatal("a repeated cancel request changed the task")
				}
			}},
		{"finish cancel, running", cancelReq, func(t *Task) error { return t.FinishCancel(now) }, EventCancelled,
			func(t *testing.T, b, a *Task) {
				if a.Status != Cancelled || a.Claim != nil {
					t.Fatalf("status %s claim %+v", a.Status, a.Claim)
				}
			}},
		{"finish cancel, requeued meanwhile", func() *Task { t := cancelReq(); return must(t, t.Requeue(t0, "handoff")) },
			func(t *Task) error { return t.FinishCancel(now) }, EventCancelled, nil},
		{"replay failed", failed, func(t *Task) error { return t.Replay(now.Add(time.Nanosecond)) }, EventReplayed,
			func(t *testing.T, b, a *Task) {
				if a.Status != Pending || a.Attempt != 0 || a.Error != "" || !a.AvailableAt.Equal(now.Add(time.Millisecond)) {
					t.Fatalf("status %s attempt %d error %q available %s", a.Status, a.Attempt, a.Error, a.AvailableAt)
				}
				if !strings.Contains(lastEvent(a).Detail, "replayed (was failed)") {
					t.Fatalf("history %+v", lastEvent(a))
				}
			}},
		{"replay cancelled after a request", func() *Task { t := cancelReq(); return must(t, t.FinishCancel(t0)) },
			func(t *Task) error { return t.Replay(now) }, EventReplayed,
			func(t *testing.T, b, a *Task) {
				if a.Status != Pending || a.CancelRequested {
					t.Fatalf("status %s requested %v", a.Status, a.CancelRequested)
				}
			}},
		{"mark corrupt", func() *Task { return &Task{ID: "t1", Shard: storage.ShardID{Group: "default", Index: 3}, Corrupt: "{"} },
			func(t *Task) error { return t.MarkCorrupt(now, errors.New("does not decode")) }, EventCorrupt,
			func(t *testing.T, b, a *Task) {
				if a.Status != Failed || !strings.Contains(a.Error, "does not decode") || a.Corrupt != "{" {
					t.Fatalf("status %s error %q corrupt %q", a.Status, a.Error, a.Corrupt)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := c.task()
			before := tk.Clone()
			if err := c.op(tk); err != nil {
				t.Fatalf("transition refused: %v", err)
			}
			if c.event != "" {
				if len(tk.History) != len(before.History)+1 {
					t.Fatalf("history grew from %d to %d, want one entry", len(before.History), len(tk.History))
				}
				if ev := lastEvent(tk); ev.Event != c.event || !ev.At.Equal(ev.At.UTC()) || ev.Attempt != tk.Attempt {
					t.Fatalf("last history entry %+v, want event %s with attempt %d", ev, c.event, tk.Attempt)
				}
			}
			if err := tk.Validate(); err != nil {
				t.Fatalf("the task is invalid after the transition: %v", err)
			}
			if c.check != nil {
				c.check(t, before, tk)
			}
		})
	}
}

func TestFail(t *testing.T) {
	now := t0.Add(10 * time.Second)
	long := strings.Repeat("é", maxErrorLen)
	cases := []struct {
		name      string
		task      func() *Task
		err       error
		permanent bool
		status    Status
		final     bool
		errText   string
	}{
		{"retryable", runningA, errors.New("flaky"), false, Pending, false, "flaky"},
		{"permanent", runningA, errors.New("bad input"), true, Failed, true, "bad input"},
		{"last attempt", exhausted, errors.New("flaky"), false, Failed, true, "flaky"},
		{"cancel requested", cancelReq, errors.New("context canceled"), false, Cancelled, true, "context canceled"},
		{"pending, unknown type", pendingTask, errors.New("no handler"), true, Failed, true, "no handler"},
		{"nil error", runningA, nil, true, Failed, true, "unknown error"},
		{"huge error", runningA, errors.New(long), true, Failed, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := c.task()
			tk.SetRand(func() float64 { return 0.5 }) // no jitter
			at, final := tk.Fail(now, c.err, c.permanent)
			if tk.Status != c.status || final != c.final || tk.Claim != nil {
				t.Fatalf("status %s final %v claim %+v, want %s %v nil", tk.Status, final, tk.Claim, c.status, c.final)
			}
			if c.errText != "" && tk.Error != c.errText {
				t.Fatalf("Error = %q, want %q", tk.Error, c.errText)
			}
			if len(tk.Error) > maxErrorLen || !strings.Contains(lastEvent(tk).Detail, tk.Error[:min(len(tk.Error), 20)]) {
				t.Fatalf("Error of %d bytes, history %+v", len(tk.Error), lastEvent(tk))
			}
			if final {
				if !at.IsZero() {
					t.Fatalf("final failure returned retry time %s", at)
				}
				return
			}
			// Attempt 1 of the fixture's policy: 1s, no jitter at u = 0.5.
			if !at.Equal(now.Add(time.Second)) || !tk.AvailableAt.Equal(at) || tk.PointerKey() == c.task().PointerKey() {
				t.Fatalf("retry at %s, available %s; want %s and a new pointer", at, tk.AvailableAt, now.Add(time.Second))
			}
		})
	}
	// On a terminal task Fail changes nothing and reports final.
	tk := completed()
	before := tk.Clone()
	if at, final := tk.Fail(now, errors.New("late"), false); !final || !at.IsZero() || !reflect.DeepEqual(tk, before) {
		t.Fatalf("Fail on a completed task: %s %v, changed %v", at, final, !reflect.DeepEqual(tk, before))
	}
}

// TestRetrySchedule: successive failures back off exponentially up to Max,
// and the attempts then run out.
func TestRetrySchedule(t *testing.T) {
	tk := pendingTask()
	tk.MaxAttempts = 8
	tk.SetRand(func() float64 { return 0.5 })
	now := t0
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60} // seconds, capped at Max = 1m
	for i, w := range want {
		if err := tk.ClaimFor(now, runnerA); err != nil {
			t.Fatalf("claim %d: %v", i+1, err)
		}
		at, final := tk.Fail(now, errors.New("flaky"), false)
		if final || at.Sub(now) != w*time.Second {
			t.Fatalf("failure %d: retry after %s (final %v), want %ds", i+1, at.Sub(now), final, w)
		}
		var nd *NotDueError
		if err := tk.ClaimFor(at.Add(-time.Millisecond), runnerA); !errors.Is(err, ErrNotDue) || !errors.As(err, &nd) || !nd.Due.Equal(at) {
			t.Fatalf("claim before the retry time: %v, want a *NotDueError due at %s", err, at)
		}
		now = at
	}
	if err := tk.ClaimFor(now, runnerA); err != nil {
		t.Fatal(err)
	}
	if _, final := tk.Fail(now, errors.New("flaky"), false); !final || tk.Status != Failed || tk.Attempt != 8 {
		t.Fatalf("after 8 attempts: final %v status %s attempt %d", final, tk.Status, tk.Attempt)
	}
}

// TestRetryDueDespiteLaterCreatedAt: the runner's reading of the S3 clock
// may trail the submitter's by the estimates' uncertainty, so a retry's
// available_at can fall before CreatedAt. It is still honoured: only a task
// that never ran is due at once by virtue of AvailableAt <= CreatedAt.
func TestRetryDueDespiteLaterCreatedAt(t *testing.T) {
	tk := pendingTask()
	tk.CreatedAt = t0.Add(900 * time.Millisecond) // the submitter's clock ran ahead
	tk.AvailableAt = tk.CreatedAt
	tk.SetRand(func() float64 { return 0.5 })
	if !tk.IsDue(t0) {
		t.Fatal("a task submitted to run at once is not due on a trailing clock")
	}
	tk.Retry.Initial = Duration(200 * time.Millisecond)
	if err := tk.ClaimFor(t0, runnerA); err != nil {
		t.Fatal(err)
	}
	at, _ := tk.Fail(t0, errors.New("flaky"), false)
	if !at.Before(tk.CreatedAt) {
		t.Fatalf("fixture: retry at %s is not before CreatedAt %s", at, tk.CreatedAt)
	}
	if err := tk.ClaimFor(at.Add(-time.Millisecond), runnerA); !errors.Is(err, ErrNotDue) {
		t.Fatalf("claim 1ms before the retry's available_at: %v, want ErrNotDue", err)
	}
	if err := tk.ClaimFor(at, runnerA); err != nil {
		t.Fatalf("claim at the retry's available_at: %v", err)
	}
	// A handoff requeue of the retry keeps its available_at: still not due on a clock before it.
	if err := tk.Requeue(at, "handoff"); err != nil {
		t.Fatal(err)
	}
	if tk.Attempt != 1 || tk.IsDue(t0) {
		t.Fatalf("after requeue of the second attempt: attempt %d, due at t0 %v", tk.Attempt, tk.IsDue(t0))
	}
}

func TestBackoffBounds(t *testing.T) {
	p := DefaultRetry()
	r := rand.New(rand.NewPCG(5, 6))
	for attempt := 1; attempt <= 14; attempt++ {
		base := min(time.Duration(float64(time.Second)*math.Pow(2, float64(attempt-1))), 5*time.Minute)
		lo, hi := time.Duration(float64(base)*0.8), min(time.Duration(float64(base)*1.2), 5*time.Minute)
		seenLo, seenHi := hi, lo
		for range 2000 {
			d := p.Backoff(attempt, r.Float64)
			if d < lo-1 || d > hi+1 {
				t.Fatalf("attempt %d: delay %s outside [%s, %s]", attempt, d, lo, hi)
			}
			seenLo, seenHi = min(seenLo, d), max(seenHi, d)
		}
		// The jitter spreads the delays over most of the range.
		if spread := seenHi - seenLo; spread < (hi-lo)*8/10 {
			t.Fatalf("attempt %d: delays spread over %s of a %s range", attempt, spread, hi-lo)
		}
	}
	// Extremes of the jitter draw, and no jitter.
	if d := p.Backoff(1, func() float64 { return 0 }); d != 800*time.Millisecond {
		t.Fatalf("u = 0: %s, want 800ms", d)
	}
	if d := (RetryPolicy{Initial: Duration(time.Second), Max: Duration(time.Hour), Multiplier: 3}).Backoff(3, nil); d != 9*time.Second {
		t.Fatalf("no jitter, ×3, attempt 3: %s, want 9s", d)
	}
	// Huge attempts and multipliers stay at Max instead of overflowing, and
	// out-of-range stored policies are clamped, not trusted.
	for _, c := range []struct {
		p       RetryPolicy
		attempt int
		want    time.Duration
	}{
		{RetryPolicy{Initial: Duration(time.Second), Max: Duration(time.Minute), Multiplier: 1e300}, 1 << 30, time.Minute},
		{RetryPolicy{Initial: Duration(time.Second), Max: Duration(time.Minute), Multiplier: math.NaN()}, 5, time.Second},
		{RetryPolicy{Initial: Duration(time.Second), Max: Duration(time.Minute), Multiplier: 2, Jitter: 5}, 1, time.Second * 3 / 2},
		{RetryPolicy{Initial: -1, Max: -1}, 3, 0},
		{DefaultRetry(), 0, 1100 * time.Millisecond}, // attempt 0 counts as 1; ×1.1 at u = 0.75
	} {
		if d := c.p.Backoff(c.attempt, func() float64 { return 0.75 }); d != c.want {
			t.Errorf("%v attempt %d: %s, want %s", c.p, c.attempt, d, c.want)
		}
	}
}

func TestRetryPolicyValidate(t *testing.T) {
	if err := DefaultRetry().Validate(); err != nil {
		t.Fatal(err)
	}
	for field, p := range map[string]RetryPolicy{
		"retry.initial":    {Initial: 0, Max: Duration(time.Second), Multiplier: 2},
		"retry.max":        {Initial: Duration(time.Second), Max: Duration(time.Millisecond), Multiplier: 2},
		"retry.multiplier": {Initial: Duration(time.Second), Max: Duration(time.Second), Multiplier: 0.5},
		"retry.jitter":     {Initial: Duration(time.Second), Max: Duration(time.Second), Multiplier: 1, Jitter: 1.5},
	} {
		var ve *ValidationError
		if err := p.Validate(); !errors.As(err, &ve) || ve.Field != field {
			t.Errorf("%+v: %v, want an error on %s", p, err, field)
		}
	}
}

func TestHistoryTrimming(t *testing.T) {
	tk := pendingTask()
	for i := range 40 {
		if err := tk.ClaimFor(t0, runnerA); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		if err := tk.Requeue(t0.Add(time.Duration(i)*time.Second), "r"+string(rune('a'+i%26))); err != nil {
			t.Fatal(err)
		}
	}
	// 1 submitted + 80 transitions, 32 kept.
	if len(tk.History) != DefaultHistoryLimit || tk.HistoryDropped != 81-DefaultHistoryLimit {
		t.Fatalf("%d entries kept, %d dropped; want %d and %d", len(tk.History), tk.HistoryDropped, DefaultHistoryLimit, 81-DefaultHistoryLimit)
	}
	if ev := lastEvent(tk); ev.Event != EventRequeued || !ev.At.Equal(t0.Add(39*time.Second)) {
		t.Fatalf("newest entry %+v, want the last requeue", ev)
	}
	if tk.History[0].Event != EventClaimed {
		t.Fatalf("oldest kept entry %+v", tk.History[0])
	}
	tk.SetHistoryLimit(5)
	tk.RequestCancel(t0)
	if len(tk.History) != 5 || tk.HistoryDropped != 82-5 || lastEvent(tk).Event != EventCancelled {
		t.Fatalf("with limit 5: %d kept, %d dropped, newest %+v", len(tk.History), tk.HistoryDropped, lastEvent(tk))
	}
}

// TestRenewCoalesces: the renewals of one attempt share one history entry,
// so a long task's renewals do not push its history out.
func TestRenewCoalesces(t *testing.T) {
	tk := runningA()
	n := len(tk.History)
	for i := 1; i <= 100; i++ {
		if err := tk.Renew(t0.Add(time.Duration(i)*10*time.Second), 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	ev := lastEvent(tk)
	if len(tk.History) != n+1 || ev.Event != EventRenewed || !ev.At.Equal(t0.Add(1000*time.Second)) || !strings.HasPrefix(ev.Detail, "renewed 100×") {
		t.Fatalf("%d entries (want %d), last %+v", len(tk.History), n+1, ev)
	}
	if !tk.Claim.LeaseExpiresAt.Equal(t0.Add(1030 * time.Second)) {
		t.Fatalf("lease until %s", tk.Claim.LeaseExpiresAt)
	}
	// Another attempt's renewals start a new entry.
	tk.Requeue(t0, "x")
	tk.ClaimFor(t0, runnerB)
	tk.Renew(t0, time.Second)
	if ev := lastEvent(tk); ev.Event != EventRenewed || !strings.HasPrefix(ev.Detail, "renewed 1×") || ev.Runner != "runner-b" {
		t.Fatalf("new attempt's renewal %+v", ev)
	}
}

// TestClaimRecordsEnforcement: a claim carries the claimer's enforcement
// promise through renewals and the JSON encoding; a takeover replaces it
// with the new claimer's; a claim stored without the field (an older
// runner) decodes as not enforced, which makes successors wait for its
// lease rather than take it over early.
func TestClaimRecordsEnforcement(t *testing.T) {
	enforcedA := runnerA
	enforcedA.Enforced = true
	tk := pendingTask()
	if err := tk.ClaimFor(t0, enforcedA); err != nil {
		t.Fatal(err)
	}
	if !tk.Claim.Enforced {
		t.Fatal("claim by an enforcing runner not marked enforced")
	}
	if err := tk.Renew(t0.Add(time.Second), 30*time.Second); err != nil || !tk.Claim.Enforced {
		t.Fatalf("renewal lost the promise: %v %+v", err, tk.Claim)
	}
	b, err := json.Marshal(tk)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"enforced":true`) {
		t.Fatalf("encoded claim lacks enforced: %s", b)
	}
	var back Task
	if err := json.Unmarshal(b, &back); err != nil || !back.Claim.Enforced {
		t.Fatalf("decoded: %v %+v", err, back.Claim)
	}
	if err := tk.TakeOver(t0.Add(2*time.Second), runnerB, "test"); err != nil {
		t.Fatal(err)
	}
	if tk.Claim.Enforced {
		t.Fatal("takeover by a non-enforcing runner kept the previous promise")
	}
	old := strings.Replace(string(b), `,"enforced":true`, "", 1)
	var legacy Task
	if err := json.Unmarshal([]byte(old), &legacy); err != nil || legacy.Claim == nil || legacy.Claim.Enforced {
		t.Fatalf("legacy claim: %v %+v", err, legacy.Claim)
	}
}
