package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
)

// finish runs the driver of schedule s for tick as a host would: claims
// it, runs the handler and commits the result (or, with fail, fails it
// for good instead of running it).
func (e *env) finish(t *testing.T, s *Schedule, tick time.Time, fail bool) {
	t.Helper()
	ctx := testCtx(t)
	d, etag, err := e.tasks.Store().Load(ctx, s.Shard, DriverID(s.Name, s.Generation, tick))
	if err != nil {
		t.Fatalf("driver of %s: %v", tick, err)
	}
	now := e.clock.get()
	if err := d.ClaimFor(now, task.ClaimInfo{RunnerID: "r", Epoch: 1, LeaseID: 1, Lease: 30 * time.Second}); err != nil {
		t.Fatalf("claim driver of %s: %v", tick, err)
	}
	if fail {
		d.Fail(now, errors.New("boom"), true)
	} else {
		out, err := e.c.drive(ctx, d)
		if err != nil {
			t.Fatalf("drive %s: %v", tick, err)
		}
		if err := d.Complete(now, out); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.tasks.Store().Write(ctx, d, etag); err != nil {
		t.Fatalf("commit driver of %s: %v", tick, err)
	}
}

// history reads s's history, failing the test on an error.
func (e *env) history(t *testing.T, s *Schedule) *History {
	t.Helper()
	h, err := e.c.History(testCtx(t), s)
	if err != nil {
		t.Fatalf("history of %s: %v", s.Name, err)
	}
	return h
}

// TestHistory reads a schedule's history, as the console shows it, from
// its driver tasks in S3 through a chain's life: waiting for its first
// tick, on time, behind during an outage, skipping the ticks the outage
// cost, stopped by a driver that failed for good, going on after a
// resume, and paused. Finished runs are read once: a refresh costs one
// LIST and the GETs of the runs not finished before.
func TestHistory(t *testing.T) {
	e := newEnv(t, 4)
	ctx := testCtx(t)
	s, err := e.c.Create(ctx, Spec{Name: "h", Cron: "@every 1s", Type: "echo", CatchUp: CatchUpSkip})
	if err != nil {
		t.Fatal(err)
	}
	first := s.Next(t0)
	at := func(d time.Duration) time.Time { return first.Add(d) }

	h := e.history(t, s)
	if len(h.Runs) != 0 || !h.Pending.Equal(first) || h.Behind != 0 || h.Stopped != "" || h.Last() != nil {
		t.Fatalf("before the first tick: %+v, want no run and %s pending", h, first)
	}

	// Five ticks on time.
	for i := range 5 {
		tick := at(time.Duration(i) * time.Second)
		e.clock.set(tick.Add(100 * time.Millisecond))
		e.finish(t, s, tick, false)
	}
	e.clock.set(at(4500 * time.Millisecond))
	h = e.history(t, s)
	if len(h.Runs) != 5 || h.Missed != 0 || h.Late != 0 || !h.Pending.Equal(at(5*time.Second)) || h.Behind != 0 || h.Stopped != "" {
		t.Fatalf("five on time: %+v", h)
	}
	if l := h.Last(); !l.Tick.Equal(at(4*time.Second)) || l.Status != task.Completed || l.Result == nil ||
		l.Result.Outcome != OutcomeOnTime || l.Result.Fired != TaskID("h", s.Generation, l.Tick) ||
		l.Driver != task.Ref(s.Shard, DriverID("h", s.Generation, l.Tick)) || !h.Since.Equal(first) {
		t.Fatalf("last run %+v, since %s", l, h.Since)
	}

	// A refresh reads no finished run again: one LIST, and a GET of the
	// waiting driver.
	gets, lists := e.obj.gets.Load(), e.obj.lists.Load()
	e.history(t, s)
	if g, l := e.obj.gets.Load()-gets, e.obj.lists.Load()-lists; g != 1 || l != 1 {
		t.Fatalf("a refresh made %d GETs and %d LISTs, want 1 and 1", g, l)
	}

	// An outage: the driver of +5 s waits, 2.5 s past the grace at +9.5 s.
	e.clock.set(at(9500 * time.Millisecond))
	h = e.history(t, s)
	if l := h.Last(); len(h.Runs) != 6 || l.Status != task.Pending || !h.Pending.Equal(at(5*time.Second)) ||
		h.Behind != 2500*time.Millisecond || h.Stopped != "" {
		t.Fatalf("behind: %+v, last %+v", h, l)
	}
	// It runs then: +5, +6 and +7 are more than the grace late, skipped.
	e.finish(t, s, at(5*time.Second), false)
	h = e.history(t, s)
	if h.Missed != 3 || h.Late != 1 || !h.Pending.Equal(at(8*time.Second)) || h.Behind != 0 || h.Stopped != "" {
		t.Fatalf("after the outage: %+v", h)
	}

	// The driver of +8 s fails for good: the chain stops there.
	e.finish(t, s, at(8*time.Second), true)
	h = e.history(t, s)
	if l := h.Last(); l.Status != task.Failed || !strings.Contains(l.Error, "boom") || !h.Pending.IsZero() ||
		!strings.Contains(h.Stopped, "failed") || !strings.Contains(h.Stopped, "resum") {
		t.Fatalf("failed driver: %+v, last %+v", h, l)
	}

	// Resumed, it goes on at the next tick; paused, it says so.
	if _, err := e.c.Resume(ctx, "h"); err != nil {
		t.Fatal(err)
	}
	h = e.history(t, s)
	if !h.Pending.Equal(at(10*time.Second)) || h.Stopped != "" || h.Missed != 3 {
		t.Fatalf("resumed: %+v", h)
	}
	p, err := e.c.Pause(ctx, "h")
	if err != nil {
		t.Fatal(err)
	}
	if h = e.history(t, p); h.Stopped != "paused" || h.Behind != 0 {
		t.Fatalf("paused: %+v", h)
	}

	// Only the latest HistoryRuns runs are read.
	q, err := e.c.Create(ctx, Spec{Name: "h-many", Cron: "@every 1s", Type: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	qfirst := q.Next(e.clock.get())
	for i := range HistoryRuns + 5 {
		tick := qfirst.Add(time.Duration(i) * time.Second)
		e.clock.set(tick.Add(10 * time.Millisecond))
		e.finish(t, q, tick, false)
	}
	h = e.history(t, q)
	if len(h.Runs) != HistoryRuns || !h.Since.Equal(qfirst.Add(5*time.Second)) || h.Missed != 0 {
		t.Fatalf("%d runs since %s (missed %d), want %d since %s", len(h.Runs), h.Since, h.Missed, HistoryRuns, qfirst.Add(5*time.Second))
	}
}

// TestHistoryNoChain: a schedule whose driver chain was cut (its pending
// driver cancelled, as an operator might, or its object lost) says so,
// and a resume mends it: past the cancelled tick, or at the lost one.
func TestHistoryNoChain(t *testing.T) {
	e := newEnv(t, 2)
	ctx := testCtx(t)
	s, err := e.c.Create(ctx, Spec{Name: "cut", Cron: "@hourly", Type: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	first := s.Next(t0)
	if _, err := e.tasks.Cancel(ctx, task.Ref(s.Shard, DriverID("cut", s.Generation, first))); err != nil {
		t.Fatal(err)
	}
	h := e.history(t, s)
	if len(h.Runs) != 0 || !h.Pending.IsZero() || !strings.Contains(h.Stopped, "cancelled") || !strings.Contains(h.Stopped, "resum") {
		t.Fatalf("cut chain: %+v", h)
	}
	// Resumed, the chain passes over the cancelled tick and goes on.
	if _, err := e.c.Resume(ctx, "cut"); err != nil {
		t.Fatal(err)
	}
	second := first.Add(time.Hour)
	if h := e.history(t, s); !h.Pending.Equal(second) || h.Stopped != "" {
		t.Fatalf("resumed: %+v, want %s pending", h, second)
	}
	// A driver's object lost outright: nothing waits for the next tick,
	// and a resume submits it again.
	l, err := e.c.Create(ctx, Spec{Name: "lost", Cron: "@hourly", Type: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.obj.Delete(ctx, task.TaskKey(l.Shard, DriverID("lost", l.Generation, first))); err != nil {
		t.Fatal(err)
	}
	if h := e.history(t, l); !h.Pending.IsZero() || !strings.Contains(h.Stopped, "no driver task waits") {
		t.Fatalf("driver lost: %+v", h)
	}
	if _, err := e.c.Resume(ctx, "lost"); err != nil {
		t.Fatal(err)
	}
	if h := e.history(t, l); !h.Pending.Equal(first) || h.Stopped != "" {
		t.Fatalf("lost, resumed: %+v, want %s pending", h, first)
	}
}

// TestDriverTick reads ticks from driver keys and refuses the keys of
// another schedule whose name extends this one's.
func TestDriverTick(t *testing.T) {
	prefix := "tasks/default/1/sched-h-5-"
	if tick, ok := driverTick(prefix, prefix+"1795000000.json"); !ok || tick.Unix() != 1795000000 {
		t.Fatalf("driver key: %s %v", tick, ok)
	}
	for _, k := range []string{prefix + "x-7-1795000000.json", prefix + "1795000000", prefix + ".json", "other/" + "1.json"} {
		if _, ok := driverTick(prefix, k); ok {
			t.Fatalf("%s read as a driver key of %s", k, prefix)
		}
	}
}
