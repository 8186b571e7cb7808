package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/poll"
	"github.com/tenurehq/tenure/runner"
)

// The takeover tests: a runner is cut off from etcd (TCP blackhole, S3
// still reachable) while tasks run on it, in every mix of detachment modes
// a staged rollout reaches, and the external recorder (the tasks' http:
// handler) must never see two runs of one task at the same time.
//
// Timings: a 3s runner lease, so a cut runner's shards go to the others
// about 3s after the cut; a 20s task lease, so that a successor taking a
// task over at once (within a few seconds) is told apart from one waiting
// for the claim to lapse; tasks of 10s, so that the tasks running at the
// cut still run when the successors get their shards.
const (
	takeoverTaskMS    = 10000
	takeoverTaskLease = 20 * time.Second
	takeoverTasks     = 24
)

func takeoverFlags(rec *recorder) []string {
	return append(append([]string{}, fastRunner...),
		"--set", "entity.task_lease="+takeoverTaskLease.String(),
		"--handler", "audit=http:"+rec.URL())
}

// startTakeoverCluster starts one runner per id and waits until they share
// the shards, settled.
func startTakeoverCluster(t *testing.T, rec *recorder, ids ...string) (*cluster, []*runnerProc) {
	t.Helper()
	return startSettled(t, newCluster(t), takeoverFlags(rec), ids...)
}

// startSettled starts one runner per id on c, with flags, and waits until
// they share the shards, settled.
func startSettled(t *testing.T, c *cluster, flags []string, ids ...string) (*cluster, []*runnerProc) {
	t.Helper()
	var rs []*runnerProc
	for _, id := range ids {
		rs = append(rs, c.run(id, flags...))
	}
	c.waitAllOwned(ids, 60*time.Second)
	c.waitSettled(rs, 1, 30*time.Second)
	return c, rs
}

// setMode runs `tenure config set detachment.mode=MODE --rollout PCT` and
// waits until each runner in want reports its mode in /debug/status.
func setMode(t *testing.T, c *cluster, mode string, rollout int, want map[*runnerProc]string) {
	t.Helper()
	tenure(t, "--config", c.cfgPath, "config", "set", "detachment.mode="+mode, "--rollout", strconv.Itoa(rollout))
	for r, m := range want {
		testenv.WaitFor(t, r.id+" running in "+m+" mode", 15*time.Second, func() bool {
			st, err := r.status()
			return err == nil && st.Mode == m
		})
	}
}

// submitAudit submits n tasks of takeoverTaskMS each, without entity, so
// that they spread over every runner.
func submitAudit(t *testing.T, c *cluster, n int) []string {
	t.Helper()
	return submitAuditInput(t, c, n, fmt.Sprintf(`{"ms":%d}`, takeoverTaskMS))
}

// submitAuditInput is submitAudit with the tasks' input (the recorder's:
// see recorder.serve).
func submitAuditInput(t *testing.T, c *cluster, n int, input string) []string {
	t.Helper()
	client := c.taskClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var refs []string
	for range n {
		tk, _, err := client.Submit(ctx, task.SubmitRequest{Type: "audit", MaxAttempts: 10, Input: json.RawMessage(input)})
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, tk.Ref())
	}
	return refs
}

// runningOn returns the executions on runner that are still going.
func runningOn(rec *recorder, runner string) []auditExec {
	var out []auditExec
	for _, x := range rec.All() {
		if x.Runner == runner && x.End.IsZero() {
			out = append(out, x)
		}
	}
	return out
}

// waitRunningTwo waits until victim runs at least two tasks at once.
func waitRunningTwo(t *testing.T, rec *recorder, victim *runnerProc) {
	t.Helper()
	if err := poll.Until(context.Background(), 30*time.Second, poll.Every, func() (bool, string, error) {
		return len(runningOn(rec, victim.id)) >= 2, "", nil
	}); err != nil {
		// Say what ran where, so that a failure tells a victim that got
		// too few tasks from one that did not start the ones it got.
		per := map[string][2]int{}
		for _, x := range rec.All() {
			n := per[x.Runner]
			if x.End.IsZero() {
				n[0]++
			} else {
				n[1]++
			}
			per[x.Runner] = n
		}
		t.Fatalf("%s ran fewer than 2 tasks at once within 30s (%v); executions seen, per runner [running, ended]: %v", victim.id, err, per)
	}
}

// cutWhileRunning waits until victim runs at least two tasks, then cuts it
// off from its coordination store (cutCoordination). It returns the time
// of the cut and the victim's executions under way at that moment.
func cutWhileRunning(t *testing.T, rec *recorder, victim *runnerProc) (time.Time, []auditExec) {
	t.Helper()
	waitRunningTwo(t, rec, victim)
	running := runningOn(rec, victim.id)
	store := victim.cutCoordination(t)
	cut := time.Now()
	t.Logf("cut %s off from %s with %d tasks running on it", victim.id, store, len(running))
	return cut, running
}

// cutCoordination blackholes the runner's connection to its coordination
// store, and says which store that is: etcd, through the runner's etcd
// proxy (its S3 stays reachable); or, for a runner coordinating on S3
// (no etcd proxy), its S3 proxy, which cuts it off from its task store
// too.
func (r *runnerProc) cutCoordination(t *testing.T) string {
	t.Helper()
	switch {
	case r.proxy != nil:
		r.proxy.SetMode(testenv.Blackhole)
		return "etcd"
	case r.s3 != nil:
		r.s3.set(s3Blackhole, 1)
		return "S3"
	}
	t.Fatalf("%s reaches its coordination store through no proxy of the test's", r.id)
	return ""
}

// waitShardsMoved waits until every shard is locked by one of others (the
// cut runner's shards have moved), and returns when that was seen.
func waitShardsMoved(t *testing.T, c *cluster, others []string) time.Time {
	t.Helper()
	c.waitAllOwned(others, 30*time.Second)
	return time.Now()
}

// requireStillRunning fails the test unless some of running, the victim's
// executions under way at its cut, still ran when its shards were seen
// moved: otherwise a successor could not have run them at the same time,
// whatever it did, and the test proves nothing.
func requireStillRunning(t *testing.T, rec *recorder, victim *runnerProc, running []auditExec, moved time.Time) {
	t.Helper()
	if n := stillRunningAt(rec, running, moved); n == 0 {
		t.Fatalf("none of the %d tasks running on %s at the cut still ran when its shards moved: the test proves nothing", len(running), victim.id)
	}
}

// checkSingleExecution waits for every task to finish and audits the runs
// from the recorder's view: no task ran twice at the same time, every task
// completed, none completed twice.
func checkSingleExecution(t *testing.T, c *cluster, rec *recorder, refs []string) auditReport {
	t.Helper()
	client := c.taskClient()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, ref := range refs {
		if _, err := client.Wait(ctx, ref, 200*time.Millisecond); err != nil {
			t.Fatalf("task %s did not finish: %v", ref, err)
		}
	}
	rep := audit(t, c.taskClient(), rec.all(), nil, refs, nil)
	t.Logf("audit: %d executions (%d cancelled), %d completed, %d failed, %d concurrent runs of one task",
		rep.executions, rep.cancelled, rep.completed, rep.failed, len(rep.overlaps))
	rep.check(t)
	if rep.completed != len(refs) {
		t.Errorf("%d of %d tasks completed", rep.completed, len(refs))
	}
	return rep
}

// stillRunningAt reports how many of xs were still running (as the
// recorder saw them, now) at time at.
func stillRunningAt(rec *recorder, xs []auditExec, at time.Time) int {
	n := 0
	for _, x := range rec.all() {
		for _, y := range xs {
			if x.TaskID == y.TaskID && x.Runner == y.Runner && x.Start.Equal(y.Start) && x.End.After(at) {
				n++
			}
		}
	}
	return n
}

// restartedBy returns, for each task of xs, when another runner than the
// one in xs started it again (zero if none did).
func restartedBy(rec *recorder, xs []auditExec) map[string]time.Time {
	out := map[string]time.Time{}
	for _, y := range xs {
		out[y.TaskID] = time.Time{}
		for _, x := range rec.all() {
			if x.TaskID == y.TaskID && x.Runner != y.Runner && x.Start.After(y.Start) {
				if s := out[y.TaskID]; s.IsZero() || x.Start.Before(s) {
					out[y.TaskID] = x.Start
				}
			}
		}
	}
	return out
}

// TestLiveSwitchToObserveThenCut: three runners started in enforce mode are
// switched to observe at run time; one is cut off from etcd while running
// tasks. In observe mode it keeps running them and renewing their claims
// through S3, so its successors must wait for the claims to lapse instead
// of starting the tasks again: 0 concurrent runs of one task.
func TestLiveSwitchToObserveThenCut(t *testing.T) {
	rec := newRecorder(t)
	c, rs := startTakeoverCluster(t, rec, "o1", "o2", "o3")
	setMode(t, c, "observe", 100, map[*runnerProc]string{rs[0]: "observe", rs[1]: "observe", rs[2]: "observe"})
	refs := submitAudit(t, c, takeoverTasks)
	victim := rs[1]
	_, running := cutWhileRunning(t, rec, victim)
	moved := waitShardsMoved(t, c, []string{"o1", "o3"})
	requireStillRunning(t, rec, victim, running, moved)
	checkSingleExecution(t, c, rec, refs)
}

// TestCanaryObserveRunnerCut: a canary rollout at 50% puts some runners in
// observe mode while the others enforce; the observe runner is cut off. Its
// claims were not made under enforcement, so the enforcing successors wait
// for them to lapse: 0 concurrent runs of one task.
func TestCanaryObserveRunnerCut(t *testing.T) {
	observeID, enforceIDs := canaryIDs()
	rec := newRecorder(t)
	c, rs := startTakeoverCluster(t, rec, observeID, enforceIDs[0], enforceIDs[1])
	setMode(t, c, "observe", 50, map[*runnerProc]string{rs[0]: "observe", rs[1]: "enforce", rs[2]: "enforce"})
	refs := submitAudit(t, c, takeoverTasks)
	_, running := cutWhileRunning(t, rec, rs[0])
	moved := waitShardsMoved(t, c, enforceIDs)
	requireStillRunning(t, rec, rs[0], running, moved)
	checkSingleExecution(t, c, rec, refs)
}

// canaryIDs picks runner ids for a 50% canary: one under the cut (observe
// at --rollout 50) and two above it (enforce). Two under the cut and one
// above would do; one observe runner and two enforcing ones is the sharper
// case.
func canaryIDs() (observeID string, enforceIDs []string) {
	for i := 0; observeID == "" || len(enforceIDs) < 2; i++ {
		id := "k" + strconv.Itoa(i)
		if runner.RolloutBucket(id) < 50 {
			if observeID == "" {
				observeID = id
			}
		} else if len(enforceIDs) < 2 {
			enforceIDs = append(enforceIDs, id)
		}
	}
	return observeID, enforceIDs
}

// TestSwitchAwayFromEnforceThenCut: the switch from enforce to observe
// reaches a runner just before it is cut off. The tasks it claimed under
// enforce carry that promise, so it must still stop them before its lease
// can expire, although it now observes; its successors take them over at
// once (not after the 20s claim lapse) and never run them at the same time.
func TestSwitchAwayFromEnforceThenCut(t *testing.T) {
	rec := newRecorder(t)
	c, rs := startTakeoverCluster(t, rec, "e1", "e2", "e3")
	refs := submitAudit(t, c, takeoverTasks)
	victim := rs[2]
	waitRunningTwo(t, rec, victim)
	setMode(t, c, "observe", 100, map[*runnerProc]string{rs[0]: "observe", rs[1]: "observe", rs[2]: "observe"})
	cut, running := cutWhileRunning(t, rec, victim)
	waitShardsMoved(t, c, []string{"e1", "e2"})
	checkSingleExecution(t, c, rec, refs)
	checkTakenOverAtOnce(t, rec, victim, running, cut, takeoverTaskLease)
}

// checkTakenOverAtOnce checks that each of running, the victim's
// executions under way at its cut, all claimed under enforcement, was run
// again by another runner within half the task lease of the cut: taken
// over as soon as its shard moved, not after its claim lapsed (a claim
// renewed at most lease/3 before the cut lapses at least 2/3 of the lease
// after it).
func checkTakenOverAtOnce(t *testing.T, rec *recorder, victim *runnerProc, running []auditExec, cut time.Time, lease time.Duration) {
	t.Helper()
	stopped := map[string]time.Time{}
	for _, x := range rec.all() {
		for _, y := range running {
			if x.TaskID == y.TaskID && x.Runner == y.Runner && x.Start.Equal(y.Start) {
				stopped[x.TaskID] = x.End
			}
		}
	}
	for id, at := range restartedBy(rec, running) {
		switch {
		case at.IsZero():
			t.Errorf("task %s, running on %s at the cut, was not run again by another runner", id, victim.id)
		case at.Sub(cut) > lease/2:
			t.Errorf("task %s restarted %s after the cut: its enforced claim should have been taken over at once, not after it lapsed", id, at.Sub(cut).Round(time.Millisecond))
		default:
			t.Logf("task %s stopped by %s %s after the cut, restarted by another runner %s after it", id, victim.id,
				stopped[id].Sub(cut).Round(time.Millisecond), at.Sub(cut).Round(time.Millisecond))
		}
	}
}

// TestSwitchToEnforceDuringPartition: runners in observe mode (switched
// from enforce at run time); one is cut off, and while it is cut off the
// others are switched back to enforce. The cut runner never hears of it
// and keeps running its tasks; its claims were made in observe mode, so the
// now enforcing successors must still wait for them to lapse.
func TestSwitchToEnforceDuringPartition(t *testing.T) {
	rec := newRecorder(t)
	c, rs := startTakeoverCluster(t, rec, "w1", "w2", "w3")
	setMode(t, c, "observe", 100, map[*runnerProc]string{rs[0]: "observe", rs[1]: "observe", rs[2]: "observe"})
	refs := submitAudit(t, c, takeoverTasks)
	victim := rs[0]
	_, running := cutWhileRunning(t, rec, victim)
	setMode(t, c, "enforce", 100, map[*runnerProc]string{rs[1]: "enforce", rs[2]: "enforce"})
	moved := waitShardsMoved(t, c, []string{"w2", "w3"})
	requireStillRunning(t, rec, victim, running, moved)
	checkSingleExecution(t, c, rec, refs)
}
