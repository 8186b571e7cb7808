package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/internal/testenv/poll"
	"github.com/tenurehq/tenure/storage"
)

// submitMany submits, for each of entities entities, perEntity tasks in
// order (from several goroutines, each owning some entities), and returns
// every entity's task refs in submission order.
func (e *env) submitMany(entities, perEntity int, in sleepInput) map[string][]*task.Task {
	const workers = 8
	out := map[string][]*task.Task{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < perEntity; round++ {
				for ent := w; ent < entities; ent += workers {
					id := fmt.Sprintf("e%04d", ent)
					tk, _, err := e.client.Submit(context.Background(), task.SubmitRequest{Type: "counter", Entity: id, Input: input(in)})
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					out[id] = append(out[id], tk)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatalf("submit: %v", err)
	}
	return out
}

// allTasks lists every task of the cluster.
func (e *env) allTasks() []*task.Task {
	e.t.Helper()
	var all []*task.Task
	after := ""
	for {
		page, next, err := e.client.List(ctxFor(e.t, time.Minute), task.ListOptions{After: after})
		if err != nil {
			e.t.Fatal(err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		after = next
	}
}

// checkEntityOrder fails unless each entity's executions started in
// submission order and never overlapped, counting only the runs that
// completed (a run cut short by a crash may be repeated).
func checkEntityOrder(t testing.TB, runs []execution, submitted map[string][]*task.Task) {
	t.Helper()
	byEntity := map[string][]execution{}
	for _, x := range runs {
		byEntity[x.Entity] = append(byEntity[x.Entity], x)
	}
	for ent, xs := range byEntity {
		sort.Slice(xs, func(i, j int) bool { return xs[i].Start.Before(xs[j].Start) })
		for i := 1; i < len(xs); i++ {
			prev, cur := xs[i-1], xs[i]
			end := prev.End
			if !prev.CancelledAt.IsZero() && prev.CancelledAt.Before(end) {
				end = prev.CancelledAt
			}
			if cur.Start.Before(end) && prev.Runner == cur.Runner {
				t.Fatalf("entity %s: %s started at %s while %s ran until %s on the same runner", ent, cur.TaskID, cur.Start.Format("05.000000"), prev.TaskID, end.Format("05.000000"))
			}
			if cur.Start.Before(end) && prev.CancelledAt.IsZero() {
				t.Fatalf("entity %s: %s (on %s) overlaps %s (on %s), which was not cancelled", ent, cur.TaskID, cur.Runner, prev.TaskID, prev.Runner)
			}
		}
		var order []string
		seen := map[string]bool{}
		for _, x := range xs {
			if x.Err == nil && !seen[x.TaskID] {
				seen[x.TaskID] = true
				order = append(order, x.TaskID)
			}
		}
		var want []string
		for _, tk := range submitted[ent] {
			want = append(want, tk.ID)
		}
		if fmt.Sprint(order) != fmt.Sprint(want) {
			t.Fatalf("entity %s ran %v, submitted %v", ent, order, want)
		}
	}
}

// TestThreeRunnersThousandsOfTasks: 5,000 tasks over 500 entities on three
// runners: each completes exactly once, each entity's tasks run in
// submission order and never overlap.
func TestThreeRunnersThousandsOfTasks(t *testing.T) {
	e := newEnv(t, 16)
	e.holdLeaseOpen()
	for _, id := range []string{"r1", "r2", "r3"} {
		e.start(id, e.standard)
	}
	e.waitOwned(15 * time.Second)
	e.waitSettled(15 * time.Second)
	start := time.Now()
	submitted := e.submitMany(500, 10, sleepInput{})
	t.Logf("submitted 5000 tasks in %s", time.Since(start))
	// Wait for a finished run of every task, not for 5000 starts: a run
	// repeated after a detach counts as a start while a later task may not
	// have run yet.
	testenv.WaitFor(t, "a finished run of each of the 5000 tasks", 5*time.Minute, func() bool { return e.rec.FinishedTasks() >= 5000 })
	t.Logf("5000 tasks ran within %s of the first submission", time.Since(start))

	runs := e.rec.All()
	perTask := map[string]int{}
	for _, x := range runs {
		if x.Err != nil {
			t.Fatalf("task %s failed on %s: %v", x.TaskID, x.Runner, x.Err)
		}
		perTask[x.TaskID]++
	}
	// Delivery is at least once: a run whose commit could not be made
	// before its shard moved is run again by the next owner. With no fault
	// and no rebalancing that does not happen at all; but on a loaded
	// machine a keep-alive may time out, and the runner then detaches as it
	// must, so a run cut off by that detach is repeated. A repeat is
	// accepted only after a detach was published.
	firstDetach := e.firstDetach()
	reruns := 0
	for id, n := range perTask {
		if n == 1 {
			continue
		}
		reruns++
		if firstDetach.IsZero() {
			t.Errorf("task %s ran %d times, and no runner detached", id, n)
			continue
		}
		last := time.Time{}
		for _, x := range runs {
			if x.TaskID == id && x.Start.After(last) {
				last = x.Start
			}
		}
		if last.Before(firstDetach) {
			t.Errorf("task %s ran %d times, the last at %s, before the first detach at %s", id, n, last.Format("05.000000"), firstDetach.Format("05.000000"))
		}
	}
	if !firstDetach.IsZero() {
		t.Logf("a runner detached at %s (%v); %d tasks ran again after it", firstDetach.Format("05.000000"), e.detachReasons(), reruns)
	}
	checkEntityOrder(t, runs, submitted)
	var odd *task.Task
	reclaimed := 0
	if err := poll.Until(context.Background(), time.Minute, 100*time.Millisecond, func() (bool, string, error) {
		all := e.allTasks()
		if len(all) != 5000 {
			t.Fatalf("%d tasks stored, want 5000", len(all))
		}
		odd, reclaimed = nil, 0
		for _, tk := range all {
			if tk.Status != task.Completed {
				odd = tk
				return false, "", nil
			}
			if tk.Attempt > 1 {
				// A claim cut short by a handoff before its handler started
				// (the write landed, the answer did not): taken over, run
				// once.
				reclaimed++
			}
		}
		return true, "", nil
	}); err != nil {
		b, _ := json.MarshalIndent(odd, "", "  ")
		t.Fatalf("task not completed:\n%s", b)
	}
	t.Logf("%d tasks completed after a claim that never ran was taken over", reclaimed)
	byRunner := map[string]int{}
	for _, x := range runs {
		byRunner[x.Runner]++
	}
	t.Logf("runs per runner: %v", byRunner)
}

// TestKillRunnerMidRun: a runner killed (cut off from etcd, stopped without
// any cleanup) in the middle of a run loses nothing: its tasks are taken
// over, none is left running, and no task ran on two runners at once unless
// the first run had been cancelled.
func TestKillRunnerMidRun(t *testing.T) {
	e := newEnv(t, 16)
	nodes := []*node{e.start("k1", e.standard), e.start("k2", e.standard), e.start("k3", e.standard)}
	e.waitOwned(15 * time.Second)
	var submitted map[string][]*task.Task
	submittedc := make(chan struct{})
	go func() {
		defer close(submittedc)
		submitted = e.submitMany(60, 6, sleepInput{MS: 300})
	}()
	testenv.WaitFor(t, "a third of the tasks started", time.Minute, func() bool { return e.rec.Starts() >= 120 })
	killedAt := time.Now()
	running := map[string]int{}
	for _, x := range e.rec.All() {
		if x.End.IsZero() {
			running[x.Runner]++
		}
	}
	t.Logf("running at the kill: %v; k1 owns %d shards", running, len(nodes[0].mgr.Owned()))
	nodes[0].kill()
	t.Logf("killed k1 after %d starts", e.rec.Starts())
	<-submittedc

	var all []*task.Task
	testenv.WaitFor(t, "every task finished", 3*time.Minute, func() bool {
		all = e.allTasks()
		for _, tk := range all {
			if tk.Status != task.Completed {
				return false
			}
		}
		return len(all) == 360
	})
	retried := 0
	for _, tk := range all {
		if tk.Attempt > 1 {
			retried++
		}
	}
	takeovers := 0.0
	for _, n := range nodes[1:] {
		takeovers += counterValue(t, n, "tenure_tasks_takeovers_total")
	}
	t.Logf("killed at %s; %d tasks needed another attempt, %v takeovers", killedAt.Format("05.000"), retried, takeovers)
	if retried == 0 || takeovers == 0 {
		t.Fatalf("the kill interrupted no task (retried %d, takeovers %v): the test did not test anything", retried, takeovers)
	}
	// No task ran on two runners at once unless the first was cancelled.
	byTask := map[string][]execution{}
	for _, x := range e.rec.All() {
		byTask[x.TaskID] = append(byTask[x.TaskID], x)
	}
	for id, xs := range byTask {
		for i := range xs {
			for j := range xs {
				a, b := xs[i], xs[j]
				if i == j || !a.Start.Before(b.Start) {
					continue
				}
				if b.Start.Before(a.End) && (a.CancelledAt.IsZero() || a.CancelledAt.After(b.Start)) {
					t.Fatalf("task %s ran on %s and %s at once", id, a.Runner, b.Runner)
				}
			}
		}
	}
	checkEntityOrder(t, e.rec.All(), submitted)
}

// counterValue reads a counter or gauge of a runner's registry.
func counterValue(t testing.TB, n *node, name string) float64 {
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	return sum
}

// TestDetachFencesZombie: a runner partitioned from etcd cancels its
// handlers before its lease deadline; the task is taken over after the
// lease expires, and a commit with the stale claim is refused by CAS,
// leaving the new owner's result intact.
func TestDetachFencesZombie(t *testing.T) {
	e := newEnv(t, 1)
	a := e.start("zombie", e.standard)
	e.waitOwned(10 * time.Second)
	e.start("heir", e.standard)
	tk := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Block: true}), MaxAttempts: 5})
	testenv.WaitFor(t, "the task to run on the first runner", 10*time.Second, func() bool {
		runs := e.rec.All()
		return len(runs) == 1 && runs[0].Runner == "zombie"
	})
	// What a paused zombie holds: the claimed object and its ETag.
	stale, staleEtag, err := e.tasks.Load(ctxFor(t, 10*time.Second), tk.Shard, tk.ID)
	if err != nil || stale.Status != task.Running {
		t.Fatalf("load running task: %+v %v", stale, err)
	}
	a.proxy.SetMode(testenv.Blackhole)
	testenv.WaitFor(t, "the partitioned runner to detach", 10*time.Second, func() bool { return len(a.detaches()) > 0 })
	// The transition is published after the attachment context was
	// cancelled, and the handler's context derives from it: by now it has
	// ended, at the transition's time, before the deadline minus margin.
	det := a.detaches()[0]
	first := e.rec.All()[0]
	limit := det.Deadline.Add(-e.scfg.Detachment.DetachMargin)
	if first.Ctx.Err() == nil || det.At.After(limit) {
		t.Fatalf("detached at %v with the handler's context ended: %v; the lease deadline minus margin was %v", det.At, first.Ctx.Err() != nil, limit)
	}
	testenv.WaitFor(t, "the handler to see its cancellation", 5*time.Second, func() bool { return !e.rec.All()[0].CancelledAt.IsZero() })
	// The heir takes the shard once the lease expires, and the task over.
	testenv.WaitFor(t, "the heir to run the task", 20*time.Second, func() bool {
		for _, x := range e.rec.All() {
			if x.Runner == "heir" {
				return true
			}
		}
		return false
	})
	ref := tk.Ref()
	if _, err := e.client.Cancel(ctxFor(t, 10*time.Second), ref); err != nil {
		t.Fatal(err)
	}
	final := e.final(ref, 20*time.Second)
	if final.Status != task.Cancelled || final.Attempt != 2 {
		t.Fatalf("final task %s attempt %d", final.Status, final.Attempt)
	}
	// The zombie wakes up and commits with its stale claim: refused.
	if err := stale.Complete(time.Now(), []byte(`{"zombie":true}`)); err != nil {
		t.Fatal(err)
	}
	_, err = e.tasks.Write(ctxFor(t, 10*time.Second), stale, staleEtag)
	if !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("stale commit: got %v, want ErrPrecondition", err)
	}
	after := e.final(ref, 5*time.Second)
	if after.Status != task.Cancelled || string(after.Result) == `{"zombie":true}` || after.Rev != final.Rev {
		t.Fatalf("the zombie's commit changed the task: %+v", after)
	}
}

// TestPlannedHandoffRequeues: draining a runner puts its running tasks back
// to pending while it still holds the shard, and the successor starts them
// once the watch has moved the shard: within harness.WatchBound, no timer
// that could move it being due (watchOnly), and the successor's first
// listing of the shard finding them (a reconciliation is a minute away).
func TestPlannedHandoffRequeues(t *testing.T) {
	e := newEnv(t, 4)
	e.watchOnly()
	d := e.start("drainer", e.standard)
	e.waitOwned(10 * time.Second)
	heir := e.start("heir", e.standard)
	testenv.WaitFor(t, "the shards to spread", 10*time.Second, func() bool {
		a, b := len(d.mgr.Owned()), len(heir.mgr.Owned())
		return a >= 1 && b >= 1 && a+b == 4
	})
	var refs []string
	for i := 0; i < 12; i++ {
		refs = append(refs, e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{MS: 3000})}).Ref())
	}
	testenv.WaitFor(t, "tasks running on the drainer", 10*time.Second, func() bool {
		for _, x := range e.rec.All() {
			if x.Runner == "drainer" {
				return true
			}
		}
		return false
	})
	if err := d.mgr.Drain(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if got := e.final(ref, 30*time.Second); got.Status != task.Completed {
			t.Fatalf("%s ended %s", ref, got.Status)
		}
	}
	runs := e.rec.All()
	handed := 0
	for _, x := range runs {
		if x.Runner != "drainer" || x.CancelledAt.IsZero() {
			continue
		}
		handed++
		var next *execution
		for i := range runs {
			y := runs[i]
			if y.TaskID == x.TaskID && y.Runner == "heir" && y.Start.After(x.CancelledAt) {
				next = &y
				break
			}
		}
		if next == nil {
			t.Fatalf("task %s was interrupted on the drainer but never ran on the heir", x.TaskID)
		}
		if gap := next.Start.Sub(x.CancelledAt); gap > harness.WatchBound {
			t.Fatalf("task %s picked up %s after the handoff; want within %s", x.TaskID, gap, harness.WatchBound)
		} else {
			t.Logf("task %s picked up %s after the handoff", x.TaskID, gap)
		}
		tk, err := e.client.Get(ctxFor(t, 5*time.Second), refOf(refs, x.TaskID))
		if err != nil {
			t.Fatal(err)
		}
		if tk.Attempt != 1 {
			t.Fatalf("handed-over task %s used attempt %d: a handoff must not count", x.TaskID, tk.Attempt)
		}
	}
	if handed == 0 {
		t.Fatal("no task was interrupted by the drain")
	}
}

func refOf(refs []string, id string) string {
	for _, r := range refs {
		if len(r) >= len(id) && r[len(r)-len(id):] == id {
			return r
		}
	}
	return ""
}
