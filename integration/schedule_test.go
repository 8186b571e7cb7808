package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/storage"
)

// scheduleRun is how long TestScheduleAcrossSIGKILL's schedules tick.
const scheduleRun = 60 * time.Second

// TestScheduleAcrossSIGKILL: three schedules "@every 1s" of the built-in
// echo type, one per catch-up policy, all in one shard, tick for a minute
// on three `tenure run` processes while the owner of that shard is
// SIGKILLed. Audited from outside, by reading S3.
//
// The schedule created without --catch-up has the default policy, all:
// every tick from its first to the last one of the run fires exactly
// once (no gap, no duplicate, none before its first tick or after its
// delete) and completes; the ticks of the failover gap fire late, when
// the new owner runs the chain, and none is missed.
//
// Under skip and once (--catch-up given): every fired task has the id
// derived from its tick and ran; no tick has two tasks; every tick from
// the schedule's first to the run's last fired or was passed over by a
// driver run that reached it late (more than the grace, in S3 time, its
// result says; the chain then goes on with its Next): the kill makes one
// such stall, and a loaded machine may make more. Under once each such
// run fires the latest tick it passed over, late, standing for the others,
// under skip none. The chain resumes after the kill within the failover
// bound: lease TTL 3s (revoked: harness.RevokeBound) + task lease 3s (the
// driver was running) + OrphanWait 10s (the driver died between the ready
// pointer and the object of its successor: the pointer heads the entity's
// mailbox that long) + harness.WatchBound for the moves on a loaded
// machine, below a reconciliation (a minute away), the next slower way
// back. (A failover shorter than the 2s grace plus a tick misses nothing:
// then every schedule fires every tick on time.)
func TestScheduleAcrossSIGKILL(t *testing.T) {
	c := newCluster(t)
	for _, id := range []string{"s1", "s2", "s3"} {
		c.run(id, slices.Concat(fastRunner, watchOnlyRunner)...)
	}
	rs := []*runnerProc{c.runners.Get("s1"), c.runners.Get("s2"), c.runners.Get("s3")}
	c.waitAllOwned([]string{"s1", "s2", "s3"}, 60*time.Second)
	c.waitSettled(rs, 16, 30*time.Second)

	// The other schedules' names are chosen to share the first one's
	// shard, so that one kill interrupts all three.
	shard := schedule.ShardOf(storage.DefaultGroup, devShards, "tick-skip")
	sameShard := func(prefix string) string {
		for i := 0; ; i++ {
			if n := prefix + strconv.Itoa(i); schedule.ShardOf(storage.DefaultGroup, devShards, n) == shard {
				return n
			}
		}
	}
	once, all := sameShard("tick-once-"), sameShard("tick-all-")
	gens := map[string]int64{}
	created := time.Now()
	for _, s := range []struct{ name, policy string }{{"tick-skip", "skip"}, {once, "once"}, {all, ""}} {
		args := []string{"--config", c.cfgPath, "schedule", "create", s.name, "--cron", "@every 1s", "echo",
			"--input", `{"from":"` + s.name + `"}`, "--json"}
		if s.policy != "" {
			args = append(args, "--catch-up", s.policy)
		}
		out := tenure(t, args...)
		var got struct {
			Generation int64  `json:"generation"`
			Ref        string `json:"ref"`
			CatchUp    string `json:"catch_up"`
			Window     string `json:"catch_up_window"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || got.Ref != shard.String()+"/"+s.name {
			t.Fatalf("create %s: %v\n%s", s.name, err, out)
		}
		if want := map[string]string{"": "all 1h0m0s", "skip": "skip ", "once": "once "}[s.policy]; got.CatchUp+" "+got.Window != want {
			t.Fatalf("create %s: catch-up %q window %q, want %q", s.name, got.CatchUp, got.Window, want)
		}
		gens[s.name] = got.Generation
	}
	tc := c.taskClient()

	// Kill the owner a third of the way in, once that tick, or one of the
	// next few (a skip schedule passes over the ticks its driver reaches
	// late, as on a loaded machine), has fired.
	waitFiredFrom(t, tc, "tick-skip", gens["tick-skip"], created.Add(scheduleRun/3))
	owner := c.owners()[shard]
	victim := c.runners.Get(owner)
	if victim == nil {
		t.Fatalf("shard %s owned by %q, not a runner of the test", shard, owner)
	}
	killed := time.Now()
	victim.signal(t, syscall.SIGKILL)
	victim.wait(t, 10*time.Second)
	end := created.Add(scheduleRun).Truncate(time.Second) // the run's last tick
	var deleted time.Time
	for _, n := range []string{all, "tick-skip", once} {
		if n == all {
			waitFired(t, tc, n, gens[n], end) // catch-up all fires every tick
		} else {
			waitFiredFrom(t, tc, n, gens[n], end)
		}
		tenure(t, "--config", c.cfgPath, "schedule", "delete", n)
		if n == all {
			deleted = time.Now()
		}
	}
	resumeBound := harness.RevokeBound(fastLease) + 3*time.Second + entity.DefaultConfig().OrphanWait + harness.WatchBound
	for _, n := range []string{"tick-skip", once} {
		a := auditSchedule(t, tc, n, gens[n], created.Add(scheduleRun))
		t.Logf("%s: %d ticks fired, missing %v (kill at %s), lateness median %s max %s (of the ticks on time), late fires %v; "+
			"%d driver runs late by more than the grace; the chain resumed %s after the kill",
			n, a.fired, a.missing, killed.UTC().Format("15:04:05.000"), a.median, a.max, a.late, len(a.stalls),
			a.resumedAfter(killed).Round(time.Millisecond))
		for _, m := range append(slices.Clone(a.missing), a.late...) {
			if !a.passedOver(m) {
				t.Errorf("%s: tick %s missing or fired late, and no driver run passed it over late", n, m.Format(time.RFC3339))
			}
		}
		switch {
		case n != once && len(a.late) != 0:
			t.Errorf("%s: ticks fired late under skip: %v", n, a.late)
		case n == once:
			for _, d := range a.stalls {
				if d.result.Outcome != schedule.OutcomeLate || d.result.FiredCount != 1 || d.result.Fired != schedule.TaskID(n, gens[n], d.result.Next.Add(-time.Second)) {
					t.Errorf("%s: driver run for %s, late, fired %d (%s; next %s): catch-up once fires the latest tick it passed over",
						n, d.tick.UTC().Format("15:04:05"), d.result.FiredCount, d.result.Fired, d.result.Next.UTC().Format("15:04:05"))
				}
			}
		}
		if r := a.resumedAfter(killed); r < 0 || r > resumeBound {
			t.Errorf("%s: the chain resumed %s after the kill, want within %s", n, r, resumeBound)
		}
	}
	a := auditCatchUpAll(t, tc, shard, all, gens[all], end, deleted)
	t.Logf("%s: span %s…%s, %d ticks; fired %d of them + %d after the span, before the delete; duplicates %d, missing %d, missed %d; "+
		"%d fired late (the gap: kill at %s), lateness max %s; %d driver runs fired a batch, the largest %d ticks: %v",
		all, a.first.UTC().Format("15:04:05"), end.UTC().Format("15:04:05"), a.span, a.inSpan, a.after, a.duplicates, len(a.missing), a.missed,
		len(a.late), killed.UTC().Format("15:04:05.000"), a.maxLate, a.batches, a.largest, a.batchRuns)
}

// waitFired waits until schedule name has fired the task of the tick at
// the second of at (the schedules tick every second).
func waitFired(t *testing.T, tc *task.Client, name string, gen int64, at time.Time) {
	t.Helper()
	id := schedule.TaskID(name, gen, at.Truncate(time.Second))
	ref := task.Ref(task.ShardOf(storage.DefaultGroup, devShards, "echo", "", id), id)
	testenv.WaitFor(t, "task "+ref, time.Until(at)+30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := tc.Get(ctx, ref)
		return err == nil
	})
}

// waitFiredFrom waits until schedule name has fired the task of the tick
// at the second of at or of one of the nine after it: a skip or once
// schedule whose driver reaches a tick late passes over it (skip fires
// none of the late ticks, once the latest), and fires the next ones on
// time. The audit checks every tick passed over against the driver runs.
func waitFiredFrom(t *testing.T, tc *task.Client, name string, gen int64, at time.Time) {
	t.Helper()
	const ticks = 10
	refs := make([]string, ticks)
	for i := range refs {
		id := schedule.TaskID(name, gen, at.Truncate(time.Second).Add(time.Duration(i)*time.Second))
		refs[i] = task.Ref(task.ShardOf(storage.DefaultGroup, devShards, "echo", "", id), id)
	}
	testenv.WaitFor(t, fmt.Sprintf("a task of %s's ticks %s…+%ds", name, at.UTC().Format("15:04:05"), ticks-1), time.Until(at)+30*time.Second+ticks*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, ref := range refs {
			if _, err := tc.Get(ctx, ref); err == nil {
				return true
			}
		}
		return false
	})
}

type scheduleAudit struct {
	fired       int
	missing     []time.Time
	late        []time.Time
	median, max time.Duration
	stalls      []driverRun // runs that reached their tick late
	claims      []time.Time // the drivers' claims and takeovers (S3 time), in order
}

// driverRun is a completed driver task of a schedule, read from S3.
type driverRun struct {
	tick   time.Time // the tick it drove
	result schedule.Result
}

// passedOver reports whether a driver run that reached its tick late went
// on past tick: such a run passes over its tick and those after it that
// were late too, firing none of them (skip) or the latest (once).
func (a scheduleAudit) passedOver(tick time.Time) bool {
	return slices.ContainsFunc(a.stalls, func(d driverRun) bool { return !tick.Before(d.tick) && tick.Before(d.result.Next) })
}

// resumedAfter is how long after at a driver of the chain was first
// claimed (-1 if none was).
func (a scheduleAudit) resumedAfter(at time.Time) time.Duration {
	for _, c := range a.claims {
		if c.After(at) {
			return c.Sub(at)
		}
	}
	return -1
}

// auditSchedule reads every echo task schedule name fired (by listing, so
// that a task with an unexpected id shows too) and checks each against
// the tick its id names; the ticks it reports missing run from the
// schedule's first to the last of to. The drivers' results say which
// fired late and which runs reached their tick late.
func auditSchedule(t *testing.T, tc *task.Client, name string, gen int64, to time.Time) scheduleAudit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := "cron-" + name + "-"
	ticks := map[int64]*task.Task{}
	lateIDs := map[string]bool{} // fired late, as the drivers' results say
	var a scheduleAudit
	after := ""
	for {
		ts, next, err := tc.List(ctx, task.ListOptions{After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			if tk.Type == schedule.DriverType && tk.Entity == name && tk.Status == task.Completed {
				var d driverRun
				var in struct{ Tick time.Time }
				if err := json.Unmarshal(tk.Input, &in); err != nil {
					t.Errorf("%s: driver %s input %s: %v", name, tk.Ref(), tk.Input, err)
				}
				d.tick = in.Tick
				if err := json.Unmarshal(tk.Result, &d.result); err != nil {
					t.Errorf("%s: driver %s result %s: %v", name, tk.Ref(), tk.Result, err)
				}
				for _, h := range tk.History {
					if h.Event == task.EventClaimed || h.Event == task.EventTakenOver {
						a.claims = append(a.claims, h.At)
					}
				}
				switch d.result.Outcome {
				case schedule.OutcomeLate:
					lateIDs[d.result.Fired] = true
					a.stalls = append(a.stalls, d)
				case schedule.OutcomeSkipped:
					a.stalls = append(a.stalls, d)
				}
			}
			rest, ok := strings.CutPrefix(tk.ID, prefix)
			if tk.Type != "echo" || !ok {
				continue
			}
			g, sec, _ := strings.Cut(rest, "-")
			unix, err := strconv.ParseInt(sec, 10, 64)
			if err != nil || g != strconv.FormatInt(gen, 10) {
				t.Errorf("%s: task %s has an id not derived from (schedule, generation, tick)", name, tk.Ref())
				continue
			}
			if prev := ticks[unix]; prev != nil {
				t.Errorf("%s: tick %d fired twice: %s and %s", name, unix, prev.Ref(), tk.Ref())
			}
			if want := schedule.TaskID(name, gen, time.Unix(unix, 0)); tk.ID != want || string(tk.Input) != `{"from":"`+name+`"}` {
				t.Errorf("%s: task %s (input %s), want id %s", name, tk.Ref(), tk.Input, want)
			}
			ticks[unix] = tk
		}
		if next == "" {
			break
		}
		after = next
	}
	slices.SortFunc(a.claims, time.Time.Compare)
	if len(ticks) == 0 {
		t.Fatalf("%s fired nothing", name)
	}
	first := (&schedule.Schedule{Cron: "@every 1s", Generation: gen}).Next(time.Unix(0, gen))
	last := to.Truncate(time.Second)
	for s := range ticks {
		if tick := time.Unix(s, 0); tick.Before(first) {
			t.Errorf("%s: tick %s fired, before the schedule's first %s", name, tick.UTC(), first.UTC())
		} else if tick.After(last) {
			last = tick
		}
	}
	var lags []time.Duration
	for tick := first; !tick.After(last); tick = tick.Add(time.Second) {
		tk := ticks[tick.Unix()]
		if tk == nil {
			a.missing = append(a.missing, tick)
			continue
		}
		a.fired++
		done, err := tc.Wait(ctx, tk.Ref(), 100*time.Millisecond)
		if err != nil || done.Status != task.Completed {
			t.Errorf("%s: task %s did not complete: %v %v", name, tk.Ref(), err, done)
		}
		if lateIDs[tk.ID] {
			a.late = append(a.late, tick)
			continue
		}
		lags = append(lags, tk.CreatedAt.Sub(tick))
	}
	slices.Sort(lags)
	if len(lags) > 0 {
		a.median, a.max = lags[len(lags)/2], lags[len(lags)-1]
	}
	return a
}

type catchUpAudit struct {
	first             time.Time // the schedule's first tick
	span, inSpan      int       // ticks from first to the run's end; fired of them
	after, duplicates int       // fired after the span; ticks with two tasks
	missing, late     []time.Time
	maxLate           time.Duration
	missed            int // the drivers' count of ticks older than the window
	batches, largest  int // driver runs that fired more than one tick; most ticks a run fired
	batchRuns         []string
}

// auditCatchUpAll checks a schedule of catch-up all, deleted at deleted,
// once its drivers have all finished: each of its ticks from its first to
// end has exactly one task, with the derived id, which completed; the
// ticks after end that fired follow it with no gap, none after the
// delete; no other task of the schedule exists; its drivers counted no
// missed tick. A tick whose task was created more than the grace (2s)
// after it fired late.
func auditCatchUpAll(t *testing.T, tc *task.Client, shard storage.ShardID, name string, gen int64, end, deleted time.Time) catchUpAudit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Wait for its drivers to finish: one reading the schedule before the
	// delete may still fire a tick and submit the next driver, which ends
	// the chain at its tick.
	var drivers []*task.Task
	err := harness.Await(ctx, 30*time.Second, 300*time.Millisecond, func() (bool, string, error) {
		drivers = drivers[:0]
		after := ""
		for {
			lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
			ts, next, err := tc.List(lctx, task.ListOptions{Shard: &shard, Type: schedule.DriverType, After: after, Limit: 1000})
			lcancel()
			if err != nil {
				return false, err.Error(), nil
			}
			for _, tk := range ts {
				if tk.Entity != name {
					continue
				}
				if !tk.Status.IsTerminal() {
					return false, "driver " + tk.Ref() + " is " + string(tk.Status), nil
				}
				drivers = append(drivers, tk)
			}
			if next == "" {
				return true, "", nil
			}
			after = next
		}
	})
	if err != nil {
		t.Fatalf("%s: drivers not finished: %v", name, err)
	}
	var a catchUpAudit
	for _, d := range drivers {
		if d.Status != task.Completed {
			t.Errorf("%s: driver %s is %s: %s", name, d.Ref(), d.Status, d.Error)
			continue
		}
		var r schedule.Result
		if err := json.Unmarshal(d.Result, &r); err != nil {
			t.Errorf("%s: driver %s result %s: %v", name, d.Ref(), d.Result, err)
		}
		a.missed += r.Missed
		if r.FiredCount > 1 {
			a.batches++
			a.batchRuns = append(a.batchRuns, fmt.Sprintf("%s attempt %d: %d ticks, next %s",
				d.ID, d.Attempt, r.FiredCount, r.Next.UTC().Format("15:04:05")))
		}
		a.largest = max(a.largest, r.FiredCount)
	}

	prefix := "cron-" + name + "-"
	ticks := map[int64]*task.Task{}
	after := ""
	for {
		ts, next, err := tc.List(ctx, task.ListOptions{After: after, Limit: 1000, Type: "echo"})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			rest, ok := strings.CutPrefix(tk.ID, prefix)
			if !ok {
				continue
			}
			g, sec, _ := strings.Cut(rest, "-")
			unix, err := strconv.ParseInt(sec, 10, 64)
			if err != nil || g != strconv.FormatInt(gen, 10) || tk.ID != schedule.TaskID(name, gen, time.Unix(unix, 0)) ||
				string(tk.Input) != `{"from":"`+name+`"}` {
				t.Errorf("%s: task %s (input %s) is not one the schedule fires", name, tk.Ref(), tk.Input)
				continue
			}
			if prev := ticks[unix]; prev != nil {
				a.duplicates++
				t.Errorf("%s: tick %d fired twice: %s and %s", name, unix, prev.Ref(), tk.Ref())
			}
			ticks[unix] = tk
		}
		if next == "" {
			break
		}
		after = next
	}

	a.first = (&schedule.Schedule{Cron: "@every 1s", Generation: gen}).Next(time.Unix(0, gen))
	last := a.first
	for s := range ticks {
		tick := time.Unix(s, 0)
		if tick.Before(a.first) || tick.After(deleted.Add(2*time.Second)) {
			t.Errorf("%s: tick %s fired, outside [its first tick %s, the delete %s]", name, tick.UTC(), a.first.UTC(), deleted.UTC())
		}
		if tick.After(last) {
			last = tick
		}
	}
	if end.After(last) {
		last = end // the span's ticks count missing up to its end
	}
	for tick := a.first; !tick.After(last); tick = tick.Add(time.Second) {
		tk := ticks[tick.Unix()]
		if !tick.After(end) {
			a.span++
		}
		if tk == nil {
			a.missing = append(a.missing, tick)
			continue
		}
		if !tick.After(end) {
			a.inSpan++
		} else {
			a.after++
		}
		if lag := tk.CreatedAt.Sub(tick); lag > 2*time.Second {
			a.late = append(a.late, tick)
			a.maxLate = max(a.maxLate, lag)
		}
		done, err := tc.Wait(ctx, tk.Ref(), 100*time.Millisecond)
		if err != nil || done.Status != task.Completed {
			t.Errorf("%s: task %s did not complete: %v %v", name, tk.Ref(), err, done)
		}
	}
	if len(a.missing) > 0 || a.inSpan != a.span || a.missed != 0 {
		t.Errorf("%s: ticks %v of %s…%s have no task (%d of %d fired), %d counted missed: catch-up all fires every tick within its window",
			name, a.missing, a.first.UTC(), last.UTC(), a.inSpan, a.span, a.missed)
	}
	return a
}
