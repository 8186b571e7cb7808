package entity

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// taskKeys lists every task object of the env's bucket, through the
// submitters' own connection: what S3 holds, not what a runner says.
func (e *env) taskKeys() []string {
	e.t.Helper()
	var keys []string
	for o, err := range storage.Walk(ctxFor(e.t, 10*time.Second), e.tasks.Objects(), task.TasksPrefix, "", 0) {
		if err != nil {
			e.t.Fatalf("listing task objects: %v", err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// skewedClient returns a task client whose S3 clock is the runners' (see
// env.skew).
func (e *env) skewedClient() *task.Client {
	e.t.Helper()
	c, err := task.NewClient(e.runnerTaskStore("skewed-client"), task.ClientConfig{Shards: e.Meta.Shards, Logger: e.logs.logger("skewed-client")})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// TestFinishedTasksDeletedAfterRetention: the shard
// owner deletes completed, failed and cancelled tasks once they are older
// than entity.task_retention, left at its default (7 days): the runners'
// S3 clock is moved 8 days ahead instead of waiting. Pending and running
// tasks stay, and so does a task that finished after the move (young in S3
// time, though its object's LastModified on the real server is old). What
// is deleted is seen by listing S3 directly.
func TestFinishedTasksDeletedAfterRetention(t *testing.T) {
	e := newEnv(t, 1)
	e.skew = &atomic.Int64{}
	e.ecfg.ReconcileInterval = time.Second
	ctx := ctxFor(t, 60*time.Second)

	first := e.start("first", e.standard)
	e.waitOwned(10 * time.Second)
	completed := e.submit(task.SubmitRequest{Type: "job"})
	counted := e.submit(task.SubmitRequest{Type: "counter", Entity: "c1"})
	failed := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Perm: true})})
	cancelled := e.submit(task.SubmitRequest{Type: "job", Delay: time.Hour})
	if tk, err := e.client.Cancel(ctx, cancelled.Ref()); err != nil || tk.Status != task.Cancelled {
		t.Fatalf("cancel: %v %+v", err, tk)
	}
	pending := e.submit(task.SubmitRequest{Type: "job", Delay: 30 * 24 * time.Hour})
	for _, tk := range []*task.Task{completed, counted, failed} {
		e.final(tk.Ref(), 20*time.Second)
	}
	first.stop()

	e.skew.Store(int64(8 * 24 * time.Hour))
	young := e.submit(task.SubmitRequest{Type: "job", Delay: time.Hour})
	if tk, err := e.skewedClient().Cancel(ctx, young.Ref()); err != nil || tk.Status != task.Cancelled {
		t.Fatalf("cancel on the moved clock: %v %+v", err, tk)
	}
	running := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Block: true})})
	second := e.start("second", e.standard)

	old := []*task.Task{completed, counted, failed, cancelled}
	testenv.WaitFor(t, "the finished tasks older than the retention to be gone from S3", 30*time.Second, func() bool {
		keys := e.taskKeys()
		return !slices.ContainsFunc(old, func(tk *task.Task) bool { return slices.Contains(keys, tk.Key()) })
	})
	// The pass that deleted them has seen every task of the shard once it
	// has ended.
	testenv.WaitFor(t, "the sweep pass to end", 10*time.Second, func() bool {
		return counterValue(t, second, "tenure_tasks_sweeps_total") >= 1
	})
	testenv.WaitFor(t, "the blocking task to run", 10*time.Second, func() bool {
		tk, err := e.client.Get(ctx, running.Ref())
		return err == nil && tk.Status == task.Running
	})
	keys := e.taskKeys()
	for _, tk := range []*task.Task{pending, young, running} {
		if !slices.Contains(keys, tk.Key()) {
			t.Errorf("task %s (%s) was deleted", tk.Ref(), tk.Status)
		}
	}
	if n := counterValue(t, second, "tenure_tasks_purged_total"); n != float64(len(old)) {
		t.Errorf("tenure_tasks_purged_total = %v, want %d", n, len(old))
	}
}

// TestShortRetentionDeletesFinishedTasks (in real time):
// with entity.task_retention at 3 s, a completed and a failed task vanish
// from S3 — watched by listing S3 from the moment each finished — no
// earlier than 3 s after their last write and within a few sweep
// intervals of it; a pending task scheduled ahead and a running one stay.
func TestShortRetentionDeletesFinishedTasks(t *testing.T) {
	const retention = 3 * time.Second
	e := newEnv(t, 1)
	e.ecfg.TaskRetention = retention
	e.ecfg.TaskSweepInterval = time.Second
	e.ecfg.ReconcileInterval = time.Second
	ctx := ctxFor(t, 60*time.Second)
	e.start("keeper", e.standard)
	e.waitOwned(10 * time.Second)
	pending := e.submit(task.SubmitRequest{Type: "job", Delay: time.Hour})
	running := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Block: true})})
	finished := []*task.Task{
		e.submit(task.SubmitRequest{Type: "job"}),
		e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Perm: true})}),
	}
	for i, tk := range finished {
		finished[i] = e.final(tk.Ref(), 20*time.Second)
	}
	// Watch S3 from now on: each finished task must still be there until
	// its last write (S3 time, from the same server's clock) is retention
	// old, and gone some seconds later.
	goneAt := map[string]time.Time{}
	testenv.WaitFor(t, "the finished tasks to be deleted", 30*time.Second, func() bool {
		keys := e.taskKeys()
		now := time.Now()
		for _, tk := range finished {
			if _, gone := goneAt[tk.Key()]; !gone && !slices.Contains(keys, tk.Key()) {
				goneAt[tk.Key()] = now
			}
		}
		return len(goneAt) == len(finished)
	})
	for _, tk := range finished {
		age := goneAt[tk.Key()].Sub(tk.UpdatedAt)
		t.Logf("%s task %s gone %s after its last write", tk.Status, tk.Ref(), age.Round(time.Millisecond))
		if age < retention {
			t.Errorf("%s task %s deleted %s after its last write, before the %s retention", tk.Status, tk.Ref(), age, retention)
		}
	}
	keys := e.taskKeys()
	for _, tk := range []*task.Task{pending, running} {
		if !slices.Contains(keys, tk.Key()) {
			t.Errorf("task %s (%s) was deleted", tk.Ref(), tk.Status)
		}
	}
	if tk, err := e.client.Get(ctx, running.Ref()); err != nil || tk.Status != task.Running {
		t.Errorf("the blocking task: %v %+v, want it still running", err, tk)
	}
}
