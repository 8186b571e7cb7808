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
// derived from its tick and ran; no tick has two tasks; the ticks without
// a task lie in the failover gap around the kill, whose bound is lease
// TTL 3s + task lease 3s (the driver was running) + OrphanWait 10s (the
// driver died between the ready pointer and the object of its successor:
// the pointer heads the entity's mailbox that long) + 2s; under once
// missed ticks are stood for by a late fire (one per stall: twice if the
// chain stalls again behind such a pointer), under skip nothing fires
// late. (A failover shorter than the 2s grace plus a tick misses nothing:
// then every schedule fires every tick on time.)
func TestScheduleAcrossSIGKILL(t *testing.T) {
	c := newCluster(t)
	for _, id := range []string{"s1", "s2", "s3"} {
		c.run(id, fastRunner...)
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

	// Kill the owner a third of the way in, once that tick has fired.
	waitFired(t, tc, "tick-skip", gens["tick-skip"], created.Add(scheduleRun/3))
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
		waitFired(t, tc, n, gens[n], end)
		tenure(t, "--config", c.cfgPath, "schedule", "delete", n)
		if n == all {
			deleted = time.Now()
		}
	}
	for _, n := range []string{"tick-skip", once} {
		a := auditSchedule(t, tc, n, gens[n], time.Unix(0, gens[n]), created.Add(scheduleRun))
		t.Logf("%s: %d ticks fired, missing %v (kill at %s), lateness median %s max %s (outside the gap), late fires %v",
			n, a.fired, a.missing, killed.UTC().Format("15:04:05.000"), a.median, a.max, a.late)
		if a.fired < int(scheduleRun/time.Second)-15 {
			t.Errorf("%s: only %d ticks fired in %s", n, a.fired, scheduleRun)
		}
		gapStart, gapEnd := killed.Add(-time.Second), killed.Add(3*time.Second+3*time.Second+10*time.Second+2*time.Second)
		for _, m := range append(a.missing, a.late...) {
			if m.Before(gapStart) || m.After(gapEnd) {
				t.Errorf("%s: tick %s missing or late outside the failover gap [%s, %s]", n, m.Format(time.RFC3339), gapStart.Format(time.RFC3339), gapEnd.Format(time.RFC3339))
			}
		}
		switch {
		case n == once && len(a.missing) > 0 && len(a.late) == 0:
			t.Errorf("%s: ticks %v missing and none fired late: catch-up once fires the latest missed tick", n, a.missing)
		case n == once && len(a.late) > 2:
			t.Errorf("%s: %d ticks fired late (%v), want at most 2 (one per stall)", n, len(a.late), a.late)
		case n != once && len(a.late) != 0:
			t.Errorf("%s: ticks fired late under skip: %v", n, a.late)
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

type scheduleAudit struct {
	fired       int
	missing     []time.Time
	late        []time.Time
	median, max time.Duration
}

// auditSchedule reads every echo task schedule name fired (by listing, so
// that a task with an unexpected id shows too) and checks each against
// the tick its id names, and that they span from about from (the
// schedule's creation: its generation, in S3 time) to to; the drivers'
// results say which fired late.
func auditSchedule(t *testing.T, tc *task.Client, name string, gen int64, from, to time.Time) scheduleAudit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := "cron-" + name + "-"
	ticks := map[int64]*task.Task{}
	lateIDs := map[string]bool{} // fired late, as the drivers' results say
	after := ""
	for {
		ts, next, err := tc.List(ctx, task.ListOptions{After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			if tk.Type == schedule.DriverType && tk.Entity == name && tk.Status == task.Completed {
				var r schedule.Result
				if err := json.Unmarshal(tk.Result, &r); err != nil {
					t.Errorf("%s: driver %s result %s: %v", name, tk.Ref(), tk.Result, err)
				}
				if r.Outcome == schedule.OutcomeLate {
					lateIDs[r.Fired] = true
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
	secs := slices.Sorted(func(yield func(int64) bool) {
		for s := range ticks {
			if !yield(s) {
				return
			}
		}
	})
	if len(secs) == 0 {
		t.Fatalf("%s fired nothing", name)
	}
	var a scheduleAudit
	var lags []time.Duration
	for s := secs[0]; s <= secs[len(secs)-1]; s++ {
		tk := ticks[s]
		tick := time.Unix(s, 0)
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
	if first, last := time.Unix(secs[0], 0), time.Unix(secs[len(secs)-1], 0); first.After(from.Add(3*time.Second)) || last.Before(to.Truncate(time.Second)) {
		t.Errorf("%s: ticks from %s to %s, want from about %s to %s", name, first, last, from, to)
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
