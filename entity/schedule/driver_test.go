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

// TestDecide is the driver's rule at a tick, by lateness and policy.
func TestDecide(t *testing.T) {
	tick := time.Date(2026, 11, 22, 17, 6, 0, 0, time.UTC)
	skip, once := &Schedule{CatchUp: CatchUpSkip}, &Schedule{CatchUp: CatchUpOnce}
	cases := []struct {
		name    string
		s       *Schedule
		lag     time.Duration
		fire    bool
		outcome string
		next    time.Time
		passed  int
	}{
		{"early", skip, -300 * time.Millisecond, true, OutcomeOnTime, tick.Add(time.Second), 0},
		{"on time", skip, 200 * time.Millisecond, true, OutcomeOnTime, tick.Add(time.Second), 0},
		{"at the grace", skip, time.Second, true, OutcomeOnTime, tick.Add(2 * time.Second), 1},
		{"missed, skip", skip, 3500 * time.Millisecond, false, OutcomeSkipped, tick.Add(4 * time.Second), 3},
		{"missed, once", once, 3500 * time.Millisecond, true, OutcomeLate, tick.Add(4 * time.Second), 3},
	}
	for _, c := range cases {
		d := decide(c.s, every1s, time.UTC, tick, tick.Add(c.lag), time.Second)
		if d.fire != c.fire || d.outcome != c.outcome || !d.next.Equal(c.next) || d.passed != c.passed {
			t.Errorf("%s: %+v, want fire %v %s next %s passed %d", c.name, d, c.fire, c.outcome, c.next, c.passed)
		}
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
// or fired late by policy; pause, delete and re-create end the chain.
func TestDriverFiresOnce(t *testing.T) {
	e := newEnv(t, 4)
	ctx := testCtx(t)
	tick := time.Date(2026, 11, 22, 17, 5, 13, 0, time.UTC)
	s, err := e.c.Create(ctx, Spec{Name: "tick", Cron: "@every 1s", Type: "echo", Entity: "e", Input: json.RawMessage(`{"n":1}`)})
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

	// The next tick is reached 2.5 s late: skipped, the chain goes on.
	next := tick.Add(time.Second)
	e.clock.set(next.Add(2500 * time.Millisecond))
	r := run(next, s.Generation)
	if r.Outcome != OutcomeSkipped || r.Fired != "" || r.Passed != 2 || !r.Next.Equal(next.Add(3*time.Second)) {
		t.Fatalf("late tick, skip: %+v", r)
	}
	if got := testutil.ToFloat64(e.c.m.fires.WithLabelValues(OutcomeSkipped)); got != 3 {
		t.Fatalf("skipped = %v, want 3", got)
	}

	// Under catch-up once the same lateness fires the tick, late.
	s2, err := e.c.Create(ctx, Spec{Name: "late", Cron: "@every 1s", Type: "echo", CatchUp: CatchUpOnce})
	if err != nil {
		t.Fatal(err)
	}
	first := s2.Next(e.clock.now)
	e.clock.set(first.Add(5 * time.Second))
	d := e.task(t, s2.Shard, DriverID("late", s2.Generation, first))
	out, err := e.c.drive(ctx, d)
	var r2 Result
	if err != nil || json.Unmarshal(out, &r2) != nil || r2.Outcome != OutcomeLate || r2.Fired != TaskID("late", s2.Generation, first) || r2.Passed != 5 {
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
