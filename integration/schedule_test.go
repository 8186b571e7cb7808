package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// scheduleRun is how long TestScheduleAcrossSIGKILL's schedules tick.
const scheduleRun = 60 * time.Second

// TestScheduleAcrossSIGKILL: two schedules "@every 1s" of the built-in
// echo type, one per catch-up policy, both in one shard, tick for a minute
// on three `tenure run` processes while the owner of that shard is
// SIGKILLed. Audited from outside, by reading S3: every fired task has the
// id derived from its tick and ran; no tick has two tasks; the ticks
// without a task lie in the failover gap around the kill, whose bound is
// lease TTL 3s + task lease 3s (the driver was running) + OrphanWait 10s
// (the driver died between the ready pointer and the object of its
// successor: the pointer heads the entity's mailbox that long) + 2s;
// under catch-up once missed ticks are stood for by a late fire (one per
// stall: twice if the chain stalls again behind such a pointer), under
// skip nothing fires late. (A failover shorter than the 2s grace plus a
// tick misses nothing: then both fire every tick.)
func TestScheduleAcrossSIGKILL(t *testing.T) {
	c := newCluster(t)
	for _, id := range []string{"s1", "s2", "s3"} {
		c.run(id, fastRunner...)
	}
	rs := []*runnerProc{c.runners.Get("s1"), c.runners.Get("s2"), c.runners.Get("s3")}
	c.waitAllOwned([]string{"s1", "s2", "s3"}, 60*time.Second)
	c.waitSettled(rs, 16, 30*time.Second)

	// The second schedule's name is chosen to share the first one's shard,
	// so that one kill interrupts both.
	shard := schedule.ShardOf(storage.DefaultGroup, devShards, "tick-skip")
	once := ""
	for i := 0; once == ""; i++ {
		if n := "tick-once-" + strconv.Itoa(i); schedule.ShardOf(storage.DefaultGroup, devShards, n) == shard {
			once = n
		}
	}
	gens := map[string]int64{}
	created := time.Now()
	for _, s := range []struct{ name, policy string }{{"tick-skip", "skip"}, {once, "once"}} {
		out := tenure(t, "--config", c.cfgPath, "schedule", "create", s.name, "--cron", "@every 1s", "echo",
			"--input", `{"from":"`+s.name+`"}`, "--catch-up", s.policy, "--json")
		var got struct {
			Generation int64  `json:"generation"`
			Ref        string `json:"ref"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || got.Ref != shard.String()+"/"+s.name {
			t.Fatalf("create %s: %v\n%s", s.name, err, out)
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
	for _, n := range []string{"tick-skip", once} {
		waitFired(t, tc, n, gens[n], created.Add(scheduleRun))
		tenure(t, "--config", c.cfgPath, "schedule", "delete", n)
	}
	for _, n := range []string{"tick-skip", once} {
		a := auditSchedule(t, tc, n, gens[n], created, created.Add(scheduleRun))
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
// the tick its id names; the drivers' results say which fired late.
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
