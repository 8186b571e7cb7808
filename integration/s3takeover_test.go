package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

// The takeover tests of takeover_test.go on coordination on S3
// (coordination: s3). There, cutting a runner off from its coordination
// store (a blackhole on its S3 proxy) cuts it off from its task store too:
// it can renew neither its lease nor its task claims. An observe (or off)
// runner does not detach, so what stops its handlers before a successor
// may take their tasks over is the claim guard of entity's renew (on the
// local clock, half a renewal period before the claim could lapse), while
// the successor waits for a claim not made under enforcement to lapse in
// S3 time (entity/claim.go, decideRunning). The mode is switched with
// `tenure config set`, which writes the dynamic config into the bucket's
// coordination objects on this backend. Judged from outside as on etcd:
// the recorder sees no two runs of one task at once, and every task
// completes.
//
// Timings, on runner leases of s3SoakTTL (6s: shorter ones lapse on a
// loaded 2-core machine with no fault at all):
//
//   - the cut runner's shards move within s3TakeoverBound (about 11s) of
//     the cut;
//   - a task lease of 20s: the claim guard of a task claimed just before
//     the cut fires about 20 - 20/6 - 1 (the S3 clock's width) ≈ 15.7s
//     after the claim, seconds after the shards moved even on a loaded
//     machine, so that the victim still runs its tasks when its successors
//     hold their shards (else a successor that took an unenforced claim
//     over at once would go unseen); the claim lapses about 21s after it
//     was made, and the successors start the task again then;
//   - first attempts of 30s: left alone, the victim would still run them
//     when the successors start them again, so that a guard that did not
//     fire would show as two runs at once for several seconds;
//   - later attempts of 1s: the successors' runs need not be long; the
//     test ends about 30s after the cut, when the first attempts of the
//     other runners end.
const (
	s3TakeoverShards    = 16
	s3TakeoverTaskLease = 20 * time.Second
	s3TakeoverTaskMS    = 30000
	s3TakeoverRetryMS   = 1000
	// s3EnforcedTaskLease is the task lease of the test whose victim's
	// claims were enforced: a successor taking them over at once does so
	// within s3TakeoverBound of the cut, one waiting for them to lapse no
	// earlier than 2/3 of the lease after it (20s), so that half the lease
	// (15s) tells the two apart.
	s3EnforcedTaskLease = 30 * time.Second
	// s3LapseSlack is how much earlier than a whole task lease after its
	// run began a successor may start a task again while still waiting for
	// its claim to lapse: the claim's expiry counts from the earliest the
	// S3 clock could read when it was written (up to s3ClockSlack early),
	// and the run begins a moment after the claim is written.
	s3LapseSlack = s3ClockSlack + time.Second
)

// s3TakeoverInput is the tasks' input: a long first attempt, short later
// ones (see recorder.serve).
var s3TakeoverInput = fmt.Sprintf(`{"ms":%d,"retry_ms":%d}`, s3TakeoverTaskMS, s3TakeoverRetryMS)

// startS3TakeoverCluster starts a cluster coordinating on S3 with one
// runner per id, tasks leased for lease, each runner logging at info level
// (printed around the cut if the test fails), and waits until they share
// the shards, settled.
func startS3TakeoverCluster(t *testing.T, rec *recorder, lease time.Duration, ids ...string) (*cluster, []*runnerProc) {
	t.Helper()
	c := newS3Cluster(t, s3TakeoverShards)
	c.logRunnersTo(t.TempDir())
	flags := append(s3SoakFlags(rec), "--set", "entity.task_lease="+lease.String())
	return startSettled(t, c, flags, ids...)
}

// explainOnFailure has a failed test print, for each of running (the
// victim's executions at the cut), every run of its task the recorder saw,
// and the victim's log from just before the cut to the end of its last
// run of them.
func explainOnFailure(t *testing.T, rec *recorder, victim *runnerProc, running []auditExec, cut time.Time) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var b strings.Builder
		last := cut
		for _, y := range running {
			fmt.Fprintf(&b, "runs of %s (times from the cut):\n", y.TaskID)
			for _, x := range rec.all() {
				if x.TaskID != y.TaskID {
					continue
				}
				fmt.Fprintf(&b, "  %s attempt %d epoch %d: %s to %s, cancelled %v\n", x.Runner, x.Attempt, x.Epoch,
					x.Start.Sub(cut).Round(time.Millisecond), x.End.Sub(cut).Round(time.Millisecond), x.Cancelled())
				if x.Runner == victim.id && x.End.After(last) {
					last = x.End
				}
			}
		}
		from, to := cut.Add(-2*time.Second), last.Add(2*time.Second)
		fmt.Fprintf(&b, "log of %s from %s to %s (cut at %s):\n", victim.id, from.Format("15:04:05.000"), to.Format("15:04:05.000"), cut.Format("15:04:05.000"))
		lines, err := runnerLogLines(victim.logPath, from, to)
		b.WriteString(strings.Join(lines, "\n"))
		if err != nil {
			fmt.Fprintf(&b, "\n(%v)", err)
		}
		t.Log(b.String())
	})
}

// checkClaimGuard judges, once every task finished, the tasks running on a
// victim in observe (or off) mode when it was cut off from S3: each was
// started again by another runner only once its claim could have lapsed
// (a whole task lease after the victim's run began, less s3LapseSlack),
// after the victim had stopped it (the audit's overlap check). It fails
// the test as proving nothing unless at least one of them, left alone,
// would still have run on the victim when it was started again: only
// then does it take the claim guard to keep the two runs apart.
func checkClaimGuard(t *testing.T, rec *recorder, victim *runnerProc, running []auditExec, cut time.Time, lease time.Duration) {
	t.Helper()
	restarted := restartedBy(rec, running)
	all := rec.all()
	outlasting := 0
	for _, y := range running {
		at := restarted[y.TaskID]
		if at.IsZero() {
			t.Errorf("task %s, running on %s at the cut, was not run again by another runner", y.TaskID, victim.id)
			continue
		}
		if y.Start.Add(s3TakeoverTaskMS * time.Millisecond).After(at) {
			outlasting++
		}
		i := slices.IndexFunc(all, func(x auditExec) bool {
			return x.TaskID == y.TaskID && x.Runner == y.Runner && x.Start.Equal(y.Start)
		})
		end := all[i]
		t.Logf("task %s: began on %s %s before the cut, stopped %s after it (cancelled: %v); begun again by another runner %s after the cut, %s after it began on %s",
			y.TaskID, victim.id, cut.Sub(y.Start).Round(time.Millisecond), end.End.Sub(cut).Round(time.Millisecond), end.Cancelled(),
			at.Sub(cut).Round(time.Millisecond), at.Sub(y.Start).Round(time.Millisecond), victim.id)
		if at.Sub(y.Start) < lease-s3LapseSlack {
			t.Errorf("task %s begun again %s after it began on %s: its claim, not made under enforcement, was taken over before it could lapse (task lease %s)",
				y.TaskID, at.Sub(y.Start).Round(time.Millisecond), victim.id, lease)
		}
	}
	if outlasting == 0 {
		t.Fatalf("none of the %d tasks running on %s at the cut would have still run there when another runner began it again: the test proves nothing of the claim guard", len(running), victim.id)
	}
}

// TestS3LiveSwitchToObserveThenCut: three runners coordinating on S3,
// started in enforce mode, are switched to observe at run time; one is cut
// off from S3 while running long tasks. It does not detach, and it cannot
// renew its claims: its claim guard must stop each handler before the
// claim lapses, and its successors must wait for the claims to lapse
// before starting the tasks again: 0 concurrent runs of one task. A claim
// guard that did not fire would have the victim run on past the lapse,
// while a successor runs the task again: an overlap of several seconds; a
// successor taking the claims over at once would overlap the victim's runs
// still going when the shards moved.
func TestS3LiveSwitchToObserveThenCut(t *testing.T) {
	rec := newRecorder(t)
	c, rs := startS3TakeoverCluster(t, rec, s3TakeoverTaskLease, "o1", "o2", "o3")
	setMode(t, c, "observe", 100, map[*runnerProc]string{rs[0]: "observe", rs[1]: "observe", rs[2]: "observe"})
	refs := submitAuditInput(t, c, takeoverTasks, s3TakeoverInput)
	victim := rs[1]
	cut, running := cutWhileRunning(t, rec, victim)
	explainOnFailure(t, rec, victim, running, cut)
	moved := waitShardsMoved(t, c, []string{"o1", "o3"})
	t.Logf("%s's shards moved %s after the cut", victim.id, moved.Sub(cut).Round(time.Millisecond))
	requireStillRunning(t, rec, victim, running, moved)
	checkSingleExecution(t, c, rec, refs)
	checkClaimGuard(t, rec, victim, running, cut, s3TakeoverTaskLease)
}

// TestS3CanaryObserveRunnerCut: on S3, a canary rollout at 50% puts one
// runner in observe mode while the two others enforce; the observe runner
// is cut off from S3 while running long tasks. Its claims were not made
// under enforcement, so the enforcing successors wait for them to lapse,
// and its claim guard stops its handlers before they do: 0 concurrent
// runs of one task. A claim guard that did not fire, or successors that
// followed their own mode rather than the claim's promise, would show as
// overlaps.
func TestS3CanaryObserveRunnerCut(t *testing.T) {
	observeID, enforceIDs := canaryIDs()
	rec := newRecorder(t)
	c, rs := startS3TakeoverCluster(t, rec, s3TakeoverTaskLease, observeID, enforceIDs[0], enforceIDs[1])
	setMode(t, c, "observe", 50, map[*runnerProc]string{rs[0]: "observe", rs[1]: "enforce", rs[2]: "enforce"})
	refs := submitAuditInput(t, c, takeoverTasks, s3TakeoverInput)
	victim := rs[0]
	cut, running := cutWhileRunning(t, rec, victim)
	explainOnFailure(t, rec, victim, running, cut)
	moved := waitShardsMoved(t, c, enforceIDs)
	t.Logf("%s's shards moved %s after the cut", victim.id, moved.Sub(cut).Round(time.Millisecond))
	requireStillRunning(t, rec, victim, running, moved)
	checkSingleExecution(t, c, rec, refs)
	checkClaimGuard(t, rec, victim, running, cut, s3TakeoverTaskLease)
}

// TestS3SwitchAwayFromEnforceThenCut: on S3, the switch from enforce to
// observe reaches a runner just before it is cut off from S3. The tasks it
// claimed under enforce carry that promise, so it must still stop them
// when its detachment decision detaches (before its lease can expire),
// although it now observes; its successors take them over at once (within
// half the 30s task lease of the cut, where waiting for the claims to
// lapse would take at least 20s) and never run them at the same time. An
// enforced attempt not bound to the decision would run on (to its claim
// guard, some 24s after its claim) past the successors' takeover: an
// overlap; a successor not trusting the enforced claim would begin it
// again too late.
func TestS3SwitchAwayFromEnforceThenCut(t *testing.T) {
	rec := newRecorder(t)
	c, rs := startS3TakeoverCluster(t, rec, s3EnforcedTaskLease, "e1", "e2", "e3")
	refs := submitAuditInput(t, c, takeoverTasks, s3TakeoverInput)
	victim := rs[2]
	// Every task claimed (under enforce) before the switch: a task the
	// victim claimed after it would not be enforced, and rightly wait for
	// its claim to lapse.
	testenv.WaitFor(t, "every task running", 30*time.Second, func() bool {
		ids := map[string]bool{}
		for _, x := range rec.All() {
			if x.End.IsZero() {
				ids[x.TaskID] = true
			}
		}
		return len(ids) == len(refs)
	})
	setMode(t, c, "observe", 100, map[*runnerProc]string{rs[0]: "observe", rs[1]: "observe", rs[2]: "observe"})
	cut, running := cutWhileRunning(t, rec, victim)
	explainOnFailure(t, rec, victim, running, cut)
	moved := waitShardsMoved(t, c, []string{"e1", "e2"})
	t.Logf("%s's shards moved %s after the cut", victim.id, moved.Sub(cut).Round(time.Millisecond))
	checkSingleExecution(t, c, rec, refs)
	checkTakenOverAtOnce(t, rec, victim, running, cut, s3EnforcedTaskLease)
}

// TestS3SwitchToEnforceDuringPartition: runners on S3 in observe mode
// (switched from enforce at run time); one is cut off from S3, and while
// it is cut off the others are switched back to enforce. The cut runner
// cannot read the config and keeps running its tasks until its claim guard
// stops them; its claims were made in observe mode, so the now enforcing
// successors must still wait for them to lapse: 0 concurrent runs of one
// task. A claim guard that did not fire, or successors that took the
// unenforced claims over because they now enforce, would show as overlaps.
func TestS3SwitchToEnforceDuringPartition(t *testing.T) {
	rec := newRecorder(t)
	c, rs := startS3TakeoverCluster(t, rec, s3TakeoverTaskLease, "w1", "w2", "w3")
	setMode(t, c, "observe", 100, map[*runnerProc]string{rs[0]: "observe", rs[1]: "observe", rs[2]: "observe"})
	refs := submitAuditInput(t, c, takeoverTasks, s3TakeoverInput)
	victim := rs[0]
	cut, running := cutWhileRunning(t, rec, victim)
	explainOnFailure(t, rec, victim, running, cut)
	setMode(t, c, "enforce", 100, map[*runnerProc]string{rs[1]: "enforce", rs[2]: "enforce"})
	switched := time.Now()
	moved := waitShardsMoved(t, c, []string{"w2", "w3"})
	t.Logf("the others enforced %s after the cut; %s's shards moved %s after it", switched.Sub(cut).Round(time.Millisecond),
		victim.id, moved.Sub(cut).Round(time.Millisecond))
	requireStillRunning(t, rec, victim, running, moved)
	checkSingleExecution(t, c, rec, refs)
	checkClaimGuard(t, rec, victim, running, cut, s3TakeoverTaskLease)
	// The successors decide on the victim's claims again when they lapse:
	// they must enforce by then, or the case is the one of
	// TestS3LiveSwitchToObserveThenCut.
	for id, at := range restartedBy(rec, running) {
		if !at.IsZero() && at.Before(switched) {
			t.Fatalf("task %s begun again %s after the cut, before the others enforced (%s after it): the test proves nothing of enforcing successors",
				id, at.Sub(cut).Round(time.Millisecond), switched.Sub(cut).Round(time.Millisecond))
		}
	}
}
