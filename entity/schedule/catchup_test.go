package schedule

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/entity/task"
)

// tasksOf lists the env's tasks of type typ.
func (e *env) tasksOf(t *testing.T, typ string) []*task.Task {
	t.Helper()
	var out []*task.Task
	after := ""
	for {
		ts, next, err := e.tasks.List(testCtx(t), task.ListOptions{After: after, Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ts...)
		if next == "" {
			return out
		}
		after = next
	}
}

// runDriver runs driver task d (as claimed, or as stored) and decodes its
// result.
func (e *env) runDriver(t *testing.T, d *task.Task) Result {
	t.Helper()
	out, err := e.c.drive(testCtx(t), d)
	if err != nil {
		t.Fatalf("drive %s: %v", d.ID, err)
	}
	var r Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDriverCatchUpAll runs a CatchUpAll schedule's drivers against real
// S3 after an outage of two minutes: the chain fires every tick of it
// once, in tick order, in batches that end at multiples of MaxBatch
// seconds, then goes on on time; a repeated run (a fork) creates no task
// and its chain meets the first; a run out of time budget hands the rest
// of its batch to the next driver; ticks older than the window are
// counted missed and not fired.
func TestDriverCatchUpAll(t *testing.T) {
	e := newEnv(t, 4)
	ctx := testCtx(t)
	s, err := e.c.Create(ctx, Spec{Name: "all", Cron: "@every 1s", Type: "echo", Input: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if s.CatchUp != CatchUpAll || s.CatchUpWindow.Std() != DefaultCatchUpWindow {
		t.Fatalf("created %+v, want catch-up all within the default window", s)
	}
	first := s.Next(t0)
	driver := func(tick time.Time) *task.Task { return e.task(t, s.Shard, DriverID("all", s.Generation, tick)) }

	// Back 120.5 s after the first tick (whose batch ends 55 ticks on):
	// every driver of the catch-up runs at once after the one before, as
	// the host runs them.
	e.clock.set(first.Add(120*time.Second + 500*time.Millisecond))
	e.clock.setStep(time.Millisecond)
	var runs []Result
	cur := first
	for cur.Before(e.clock.get()) {
		r := e.runDriver(t, driver(cur))
		runs = append(runs, r)
		if r.FiredCount == 0 || r.FiredCount > MaxBatch || r.Missed != 0 || !r.Next.After(cur) {
			t.Fatalf("run at %s: %+v", cur, r)
		}
		cur = r.Next
	}
	if len(runs) < 2 || runs[0].Outcome != OutcomeLate || !runs[0].Next.Equal(alignUp(first, MaxBatch)) {
		t.Fatalf("catch-up runs %+v, want the first to end at %s", runs, alignUp(first, MaxBatch))
	}
	last := cur.Add(-time.Second)
	echo := e.tasksOf(t, "echo")
	slices.SortFunc(echo, func(a, b *task.Task) int { return a.CreatedAt.Compare(b.CreatedAt) })
	want := int(last.Sub(first)/time.Second) + 1
	if len(echo) != want {
		t.Fatalf("%d tasks fired for the %d ticks %s…%s", len(echo), want, first, last)
	}
	for i, tk := range echo {
		if id := TaskID("all", s.Generation, first.Add(time.Duration(i)*time.Second)); tk.ID != id {
			t.Fatalf("task %d created is %s, want %s: ticks fire once each, in order", i, tk.ID, id)
		}
	}
	fires := e.c.m.fires
	if late, onTime := testutil.ToFloat64(fires.WithLabelValues(OutcomeLate)), testutil.ToFloat64(fires.WithLabelValues(OutcomeOnTime)); int(late+onTime) != want || late < 110 {
		t.Fatalf("fires: %v late, %v on time, want %d in all", late, onTime, want)
	}

	// The first driver run again (a crash before its commit, after the
	// one above ran): nothing is created, its successor's driver is
	// submitted again (it may be an orphan pointer's), and that driver,
	// late too, goes on where the first did.
	drivers := len(e.tasksOf(t, DriverType))
	again := driver(first)
	again.Attempt = 2
	r := e.runDriver(t, again)
	if r.Fired != runs[0].Fired || r.FiredLast != runs[0].FiredLast || !r.Next.Equal(runs[0].Next) {
		t.Fatalf("repeated run %+v, first run %+v", r, runs[0])
	}
	if r := e.runDriver(t, driver(first.Add(time.Second))); !r.Next.Equal(runs[0].Next) {
		t.Fatalf("re-submitted successor goes on at %s, want %s", r.Next, runs[0].Next)
	}
	if n, m := len(e.tasksOf(t, "echo")), len(e.tasksOf(t, DriverType)); n != want || m != drivers+1 {
		t.Fatalf("after a fork: %d echo tasks (want %d), %d drivers (want %d)", n, want, m, drivers+1)
	}

	// A run whose time budget is spent after its first fire (a claim of
	// a 3 ns lease) hands the rest of its batch to the next driver.
	cut, err := e.c.Create(ctx, Spec{Name: "cut", Cron: "@every 1s", Type: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	cfirst := cut.Next(e.clock.get())
	e.clock.set(cfirst.Add(10 * time.Second))
	d := e.task(t, cut.Shard, DriverID("cut", cut.Generation, cfirst))
	d.Claim = &task.Claim{ClaimedAt: e.clock.get(), LeaseExpiresAt: e.clock.get().Add(3)}
	if r := e.runDriver(t, d); r.FiredCount != 1 || !r.Next.Equal(cfirst.Add(time.Second)) {
		t.Fatalf("run out of budget: %+v, want one fire and the next tick", r)
	}
	e.task(t, cut.Shard, DriverID("cut", cut.Generation, cfirst.Add(time.Second)))

	// Ticks older than the window are missed: counted, logged, not fired.
	old, err := e.c.Create(ctx, Spec{Name: "old", Cron: "@every 1s", Type: "echo", CatchUpWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ofirst := old.Next(e.clock.get())
	e.clock.setStep(0)
	e.clock.set(ofirst.Add(5 * time.Minute)) // +4m is exactly the window old: it fires
	r = e.runDriver(t, e.task(t, old.Shard, DriverID("old", old.Generation, ofirst)))
	if r.Missed != 240 || r.Fired != TaskID("old", old.Generation, ofirst.Add(4*time.Minute)) {
		t.Fatalf("5 min late, 1 min window: %+v, want 240 missed and the fires from +4m", r)
	}
	if got := testutil.ToFloat64(fires.WithLabelValues(OutcomeMissed)); got != 240 {
		t.Fatalf("missed = %v, want 240", got)
	}
}
