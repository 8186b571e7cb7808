package entity

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// taskOps wraps a runner's object store to watch what it does to task
// objects, on the wire to the real server: LISTs of them and deletes of
// them are counted, and hooks (set before the runner starts) run on LISTs
// of them and after reads of one.
type taskOps struct {
	storage.ObjectStore
	lists, deletes atomic.Int64
	gets, writes   atomic.Int64 // reads and conditional writes of task objects
	onList         func(ctx context.Context) error
	onGet          func(ctx context.Context, key string)
}

func (o *taskOps) Replace(ctx context.Context, key string, body []byte, ifMatch string) (string, error) {
	if strings.HasPrefix(key, task.TasksPrefix) {
		o.writes.Add(1)
	}
	return o.ObjectStore.Replace(ctx, key, body, ifMatch)
}

func (o *taskOps) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListPage, error) {
	if strings.HasPrefix(prefix, task.TasksPrefix) {
		o.lists.Add(1)
		if o.onList != nil {
			if err := o.onList(ctx); err != nil {
				return storage.ListPage{}, err
			}
		}
	}
	return o.ObjectStore.List(ctx, prefix, opts)
}

func (o *taskOps) Get(ctx context.Context, key string) (storage.Object, error) {
	obj, err := o.ObjectStore.Get(ctx, key)
	if strings.HasPrefix(key, task.TasksPrefix) {
		o.gets.Add(1)
		if o.onGet != nil {
			o.onGet(ctx, key)
		}
	}
	return obj, err
}

func (o *taskOps) Delete(ctx context.Context, key string) error {
	if strings.HasPrefix(key, task.TasksPrefix) {
		o.deletes.Add(1)
	}
	return o.ObjectStore.Delete(ctx, key)
}

func (o *taskOps) DeleteIfMatch(ctx context.Context, key, ifMatch string) error {
	if strings.HasPrefix(key, task.TasksPrefix) {
		o.deletes.Add(1)
	}
	return o.ObjectStore.DeleteIfMatch(ctx, key, ifMatch)
}

// watch makes every runner of e use ops.
func (e *env) watch(ops *taskOps) {
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
		ops.ObjectStore = s
		return ops
	}
}

// TestZeroRetentionKeepsFinishedTasks: with entity.task_retention 0 the
// runner never sweeps: with its S3 clock moved ten years ahead, through
// several reconciliations, it lists no task objects, deletes none, and
// every finished task is still in S3.
func TestZeroRetentionKeepsFinishedTasks(t *testing.T) {
	e := newEnv(t, 2)
	e.skew = &atomic.Int64{}
	e.ecfg.ReconcileInterval = time.Second
	e.ecfg.TaskRetention = 0
	e.ecfg.TaskSweepInterval = time.Second
	ops := &taskOps{}
	e.watch(ops)
	n := e.start("keeper", e.standard)
	e.waitOwned(10 * time.Second)
	ctx := ctxFor(t, 30*time.Second)
	finished := []*task.Task{
		e.submit(task.SubmitRequest{Type: "job"}),
		e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Perm: true})}),
		e.submit(task.SubmitRequest{Type: "job", Delay: time.Hour}),
	}
	if _, err := e.client.Cancel(ctx, finished[2].Ref()); err != nil {
		t.Fatal(err)
	}
	for _, tk := range finished {
		e.final(tk.Ref(), 20*time.Second)
	}
	e.skew.Store(int64(10 * 365 * 24 * time.Hour))
	// Each shard reconciles every second: two more rounds each is more
	// than a sweep interval of time on the runner's own clock.
	base := counterValue(t, n, "tenure_tasks_reconciles_total")
	testenv.WaitFor(t, "two more reconciliations of each shard", 20*time.Second, func() bool {
		return counterValue(t, n, "tenure_tasks_reconciles_total") >= base+4
	})
	keys := e.taskKeys()
	for _, tk := range finished {
		if !slices.Contains(keys, tk.Key()) {
			t.Errorf("finished task %s was deleted with task_retention 0", tk.Ref())
		}
	}
	if l, d := ops.lists.Load(), ops.deletes.Load(); l != 0 || d != 0 {
		t.Errorf("with task_retention 0 the runner listed task objects %d times and deleted %d", l, d)
	}
	if s := counterValue(t, n, "tenure_tasks_sweeps_total"); s != 0 {
		t.Errorf("tenure_tasks_sweeps_total = %v with task_retention 0", s)
	}
}

// TestSweepKeepsReplayedTask: a failed task older than the retention is
// replayed between the sweep's read of it and what the sweep does next.
// The replay is not undone: the task is not deleted, its owner runs it
// again, and the sweep deletes nothing.
func TestSweepKeepsReplayedTask(t *testing.T) {
	e := newEnv(t, 1)
	e.skew = &atomic.Int64{}
	e.ecfg.ReconcileInterval = time.Second
	var calls atomic.Int64
	flaky := func(n *node, h *Host) {
		if err := h.RegisterFunc("flaky", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			if calls.Add(1) == 1 {
				return nil, Permanent(errors.New("first run fails"))
			}
			<-ctx.Done() // the replayed run holds until the runner stops
			return nil, ctx.Err()
		}); err != nil {
			t.Fatal(err)
		}
	}
	first := e.start("first", flaky)
	e.waitOwned(10 * time.Second)
	failed := e.submit(task.SubmitRequest{Type: "flaky", MaxAttempts: 1})
	if tk := e.final(failed.Ref(), 20*time.Second); tk.Status != task.Failed {
		t.Fatalf("the flaky task ended %s", tk.Status)
	}
	ctx := ctxFor(t, 60*time.Second)
	// The failed task has no ready pointer once its owner's trailing
	// delete (after the commit, not waited for by it) is done: wait for
	// it before stopping the owner, which would cut it short. From then
	// on only the sweep reads the task.
	var ptrs []task.Pointer
	var err error
	testenv.WaitFor(t, "the failed task's ready pointer deleted", 20*time.Second, func() bool {
		ptrs, _, err = e.tasks.ListPointers(ctx, failed.Shard, "", 0)
		return err == nil && len(ptrs) == 0
	})
	first.stop()
	if ptrs, _, err := e.tasks.ListPointers(ctx, failed.Shard, "", 0); err != nil || len(ptrs) != 0 {
		t.Fatalf("pointers of the shard: %v %v, want none", ptrs, err)
	}

	e.skew.Store(int64(8 * 24 * time.Hour))
	ops := &taskOps{}
	var listed, fired atomic.Bool
	type outcome struct {
		t   *task.Task
		err error
	}
	replayed := make(chan outcome, 1)
	ops.onList = func(context.Context) error { listed.Store(true); return nil }
	ops.onGet = func(ctx context.Context, key string) {
		if key == failed.Key() && listed.Load() && fired.CompareAndSwap(false, true) {
			tk, err := e.client.Replay(ctx, failed.Ref())
			replayed <- outcome{tk, err}
		}
	}
	e.watch(ops)
	second := e.start("second", flaky)

	var r outcome
	select {
	case r = <-replayed:
	case <-ctx.Done():
		t.Fatal("the sweep never read the failed task")
	}
	if r.err != nil || r.t.Status != task.Pending {
		t.Fatalf("replay during the sweep: %v %+v", r.err, r.t)
	}
	testenv.WaitFor(t, "the replayed task to run again", 20*time.Second, func() bool {
		tk, err := e.client.Get(ctx, failed.Ref())
		return err == nil && tk.Status == task.Running && calls.Load() == 2
	})
	testenv.WaitFor(t, "the sweep pass to end", 10*time.Second, func() bool {
		return counterValue(t, second, "tenure_tasks_sweeps_total") >= 1
	})
	if !slices.Contains(e.taskKeys(), failed.Key()) {
		t.Fatalf("the replayed task %s was deleted", failed.Ref())
	}
	if n := counterValue(t, second, "tenure_tasks_purged_total"); n != 0 {
		t.Fatalf("tenure_tasks_purged_total = %v, want 0", n)
	}
}

// TestSweepEndsWithAttachment: a sweep under way when its runner detaches
// is cancelled with the attachment: its request's context ends.
func TestSweepEndsWithAttachment(t *testing.T) {
	e := newEnv(t, 1)
	e.ecfg.ReconcileInterval = time.Second
	ops := &taskOps{}
	holding := make(chan struct{})
	var held atomic.Bool
	ended := make(chan error, 1)
	ops.onList = func(ctx context.Context) error {
		if !held.CompareAndSwap(false, true) {
			return nil
		}
		close(holding)
		<-ctx.Done()
		ended <- ctx.Err()
		return ctx.Err()
	}
	e.watch(ops)
	n := e.start("sweeper", e.standard)
	ctx := ctxFor(t, 30*time.Second)
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("no sweep started")
	}
	n.proxy.SetMode(testenv.Blackhole)
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the sweep's request ended with %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("the sweep's request outlived the runner's attachment")
	}
	// The machine cancels the attachment and then tells its subscribers,
	// the manager (which ends the shard, and so the sweep's request)
	// before this test's recorder: the detach is recorded a moment after
	// the request ends, so it is waited for, within the lease's deadline.
	testenv.WaitFor(t, "the runner's detach to be recorded", 5*time.Second, func() bool { return len(n.detaches()) > 0 })
	n.kill()
}

// TestSweepRequestCost measures, on the runner's requests to the real
// server, what the sweep costs: for 20 completed and 5 failed tasks older
// than the retention, one GET and one DELETE each, one PUT (the mark) per
// failed one, and one LIST per pass; once they are gone, a pass over the
// idle shard costs one LIST and nothing else.
func TestSweepRequestCost(t *testing.T) {
	e := newEnv(t, 1)
	e.skew = &atomic.Int64{}
	e.ecfg.ReconcileInterval = time.Second
	e.ecfg.TaskSweepInterval = time.Second
	first := e.start("first", e.standard)
	e.waitOwned(10 * time.Second)
	var old []*task.Task
	for i := 0; i < 25; i++ {
		req := task.SubmitRequest{Type: "job"}
		if i%5 == 0 {
			req.Input = input(sleepInput{Perm: true})
		}
		old = append(old, e.submit(req))
	}
	for _, tk := range old {
		e.final(tk.Ref(), 20*time.Second)
	}
	first.stop()
	e.skew.Store(int64(8 * 24 * time.Hour))
	ops := &taskOps{}
	e.watch(ops)
	second := e.start("second", e.standard)

	testenv.WaitFor(t, "the old tasks to be gone from S3", 20*time.Second, func() bool { return len(e.taskKeys()) == 0 })
	testenv.WaitFor(t, "two more sweep passes over the idle shard", 20*time.Second, func() bool {
		return counterValue(t, second, "tenure_tasks_sweeps_total") >= 3
	})
	sweeps := counterValue(t, second, "tenure_tasks_sweeps_total")
	lists, gets, writes, deletes := ops.lists.Load(), ops.gets.Load(), ops.writes.Load(), ops.deletes.Load()
	t.Logf("%v passes: %d LISTs, %d GETs, %d PUTs, %d DELETEs of task objects", sweeps, lists, gets, writes, deletes)
	if gets != 25 || deletes != 25 || writes != 5 {
		t.Errorf("for 25 tasks (5 failed): %d GETs, %d DELETEs, %d PUTs; want 25, 25, 5", gets, deletes, writes)
	}
	// A pass under way may have listed already.
	if float64(lists) < sweeps || float64(lists) > sweeps+1 {
		t.Errorf("%d LISTs of task objects in %v passes, want one per pass", lists, sweeps)
	}
}
