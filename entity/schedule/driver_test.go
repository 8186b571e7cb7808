package schedule

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

// every1s is "@every 1s" read at whole seconds.
var every1s, _, _ = parse("@every 1s", "")

// firedTicks returns the ticks d fires.
func firedTicks(d decision) []time.Time {
	var out []time.Time
	for _, f := range d.fires {
		out = append(out, f.tick)
	}
	return out
}

// TestDecide is the driver's rule at a tick, by lateness, under the
// policies that fire at most one tick a run (skip, once).
func TestDecide(t *testing.T) {
	tick := time.Date(2026, 11, 22, 17, 6, 0, 0, time.UTC)
	skip, once := &Schedule{CatchUp: CatchUpSkip}, &Schedule{CatchUp: CatchUpOnce}
	cases := []struct {
		name     string
		s        *Schedule
		lag      time.Duration
		fire     bool
		fireTick time.Time
		outcome  string
		next     time.Time
		skipped  int
	}{
		{"early", skip, -300 * time.Millisecond, true, tick, OutcomeOnTime, tick.Add(time.Second), 0},
		{"on time", skip, 200 * time.Millisecond, true, tick, OutcomeOnTime, tick.Add(time.Second), 0},
		// The next tick is due already, within the grace: its driver fires it.
		{"at the grace", skip, time.Second, true, tick, OutcomeOnTime, tick.Add(time.Second), 0},
		// Missed: ticks +0, +1 and +2 are more than 1s old at +3.5s.
		{"missed, skip", skip, 3500 * time.Millisecond, false, time.Time{}, OutcomeSkipped, tick.Add(3 * time.Second), 3},
		{"missed, once", once, 3500 * time.Millisecond, true, tick.Add(2 * time.Second), OutcomeLate, tick.Add(3 * time.Second), 2},
	}
	for _, c := range cases {
		d := decide(c.s, every1s, time.UTC, tick, tick.Add(c.lag), time.Second, MaxBatch)
		fireTick := time.Time{}
		if len(d.fires) == 1 {
			fireTick = d.fires[0].tick
		}
		if (len(d.fires) == 1) != c.fire || len(d.fires) > 1 || !fireTick.Equal(c.fireTick) || d.outcome != c.outcome ||
			!d.next.Equal(c.next) || d.skipped != c.skipped || d.missed != 0 {
			t.Errorf("%s: %+v, want fire %v %s %s next %s skipped %d", c.name, d, c.fire, c.fireTick, c.outcome, c.next, c.skipped)
		}
	}
	// Two forks of one chain, late together, fire the same tick.
	a := decide(once, every1s, time.UTC, tick, tick.Add(3200*time.Millisecond), time.Second, MaxBatch)
	b := decide(once, every1s, time.UTC, tick.Add(time.Second), tick.Add(3300*time.Millisecond), time.Second, MaxBatch)
	if !a.fires[0].tick.Equal(b.fires[0].tick) || !a.next.Equal(b.next) {
		t.Fatalf("forks fire %s and %s, go on at %s and %s", a.fires[0].tick, b.fires[0].tick, a.next, b.next)
	}
	// A zone: 03:00 Paris in winter is 02:00 UTC.
	sched, loc, err := parse("0 3 * * *", "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	if n := next(sched, loc, tick); !n.Equal(time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC)) {
		t.Fatalf("next 03:00 Paris after %s = %s", tick, n)
	}
}

// TestDriverFiresOnce runs the driver's handler against real S3 as the
// runner would: the tick fires the schedule's task with the derived id
// and submits the next tick's driver; a second run of the same tick (a
// crash before its commit) creates nothing more; a late tick is skipped
// or fired late by policy (skip, once; TestDriverCatchUpAll has all);
// pause, delete and re-create end the chain.
func TestDriverFiresOnce(t *testing.T) {
	e := newEnv(t, 4)
	ctx := testCtx(t)
	tick := time.Date(2026, 11, 22, 17, 5, 13, 0, time.UTC)
	s, err := e.c.Create(ctx, Spec{Name: "tick", Cron: "@every 1s", Type: "echo", Entity: "e", Input: json.RawMessage(`{"n":1}`), CatchUp: CatchUpSkip})
	if err != nil {
		t.Fatal(err)
	}
	run := func(tick time.Time, gen int64) Result {
		t.Helper()
		d := e.task(t, s.Shard, DriverID("tick", gen, tick))
		out, err := e.c.drive(ctx, d)
		if err != nil {
			t.Fatalf("drive %s: %v", tick, err)
		}
		var r Result
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}

	e.clock.set(tick.Add(150 * time.Millisecond))
	for range 2 {
		r := run(tick, s.Generation)
		if r.Outcome != OutcomeOnTime || r.Fired != TaskID("tick", s.Generation, tick) || !r.Next.Equal(tick.Add(time.Second)) || r.LagMS != 150 {
			t.Fatalf("on-time tick: %+v", r)
		}
	}
	fired := e.task(t, task.ShardOf("default", 4, "echo", "e", ""), TaskID("tick", s.Generation, tick))
	if fired.Type != "echo" || string(fired.Input) != `{"n":1}` {
		t.Fatalf("fired %+v", fired)
	}
	ids := e.taskIDs(t)
	if len(ids["echo"]) != 1 || len(ids[DriverType]) != 2 {
		t.Fatalf("tasks after a tick driven twice: %v, want 1 echo and 2 drivers", ids)
	}
	if got := testutil.ToFloat64(e.c.m.fires.WithLabelValues(OutcomeOnTime)); got != 1 {
		t.Fatalf("on_time fires = %v, want 1 (a repeat counts nothing)", got)
	}

	// The next tick is reached 2.5 s late, past the 2 s grace: missed, as
	// is none after it; the chain goes on with the tick 1 s after it, due
	// and within the grace.
	next := tick.Add(time.Second)
	e.clock.set(next.Add(2500 * time.Millisecond))
	r := run(next, s.Generation)
	if r.Outcome != OutcomeSkipped || r.Fired != "" || r.Skipped != 1 || !r.Next.Equal(next.Add(time.Second)) {
		t.Fatalf("late tick, skip: %+v", r)
	}
	if got := testutil.ToFloat64(e.c.m.fires.WithLabelValues(OutcomeSkipped)); got != 1 {
		t.Fatalf("skipped = %v, want 1", got)
	}

	// Under catch-up once a late tick fires the latest missed tick, late:
	// at +5s with a 2s grace ticks +0…+2 are missed (+3 is exactly the
	// grace late: on time); +2 fires.
	s2, err := e.c.Create(ctx, Spec{Name: "late", Cron: "@every 1s", Type: "echo", CatchUp: CatchUpOnce})
	if err != nil {
		t.Fatal(err)
	}
	first := s2.Next(e.clock.now)
	e.clock.set(first.Add(5 * time.Second))
	d := e.task(t, s2.Shard, DriverID("late", s2.Generation, first))
	out, err := e.c.drive(ctx, d)
	var r2 Result
	if err != nil || json.Unmarshal(out, &r2) != nil || r2.Outcome != OutcomeLate || r2.Fired != TaskID("late", s2.Generation, first.Add(2*time.Second)) || r2.Skipped != 2 || !r2.Next.Equal(first.Add(3*time.Second)) {
		t.Fatalf("late tick, once: %s %v", out, err)
	}

	// Paused, deleted, replaced: the chain ends and fires nothing.
	cur := r.Next
	if _, err := e.c.Pause(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	e.clock.set(cur)
	if r := run(cur, s.Generation); r.Stopped != "paused" {
		t.Fatalf("paused: %+v", r)
	}
	if err := e.c.Delete(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	if r := run(cur, s.Generation); r.Stopped != "deleted" {
		t.Fatalf("deleted: %+v", r)
	}
	e.clock.set(cur.Add(time.Minute))
	if _, err := e.c.Create(ctx, Spec{Name: "tick", Cron: "@every 1s", Type: "echo", Entity: "e", Input: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	if r := run(cur, s.Generation); r.Stopped != "replaced" {
		t.Fatalf("replaced: %+v", r)
	}
	if n := len(e.taskIDs(t)["echo"]); n != 2 {
		t.Fatalf("%d echo tasks, want 2 (tick and late)", n)
	}

	// Input that is not a driver's is refused for good.
	bad := &task.Task{ID: "x", Type: DriverType, Entity: "tick", Shard: s.Shard, Input: json.RawMessage(`{}`)}
	if _, err := e.c.drive(ctx, bad); !entity.IsPermanent(err) {
		t.Fatalf("bad input: %v, want a permanent error", err)
	}
}

// TestRegister registers the driver type once, refusing a second.
func TestRegister(t *testing.T) {
	e := newEnv(t, 1)
	var ts entity.Types
	if err := Register(&ts, e.c); err != nil {
		t.Fatal(err)
	}
	if err := Register(&ts, e.c); err == nil {
		t.Fatal("second Register succeeded")
	}
	if names := ts.Names(); len(names) != 1 || names[0] != DriverType {
		t.Fatalf("types %v", names)
	}
}
