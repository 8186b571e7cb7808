package entity

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// TestYoungOrphanStartsWithoutReconciliation: a runner lists a task's
// ready pointer before the submitter has written its object, and no
// wake-up follows (the submitter's etcd is unreachable). The task still
// starts as soon as its object exists, not at the next reconciliation (a
// minute away), and it keeps its place: the entity's next task, submitted
// later but complete first, runs after it.
func TestYoungOrphanStartsWithoutReconciliation(t *testing.T) {
	e := newEnv(t, 1)
	e.ecfg.ReconcileInterval = time.Minute
	gate := &gatedCreate{reached: make(chan struct{}), release: make(chan struct{})}
	gate.ObjectStore = e.newTaskStore().Objects()
	// No waker: this submitter cannot wake anyone.
	slow, err := task.NewClient(task.NewStore(gate), task.ClientConfig{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan *task.Task, 1)
	go func() {
		tk, _, err := slow.Submit(context.Background(), task.SubmitRequest{Type: "counter", Entity: "e1", Input: input(sleepInput{MS: 200})})
		if err != nil {
			t.Error(err)
		}
		first <- tk
	}()
	waitClosed(t, gate.reached, "the first task's pointer to be written")
	n := e.start("solo", e.standard) // its first listing finds the pointer alone
	e.waitOwned(10 * time.Second)
	testenv.WaitFor(t, "the runner to find the object missing", 10*time.Second, func() bool {
		n.host.mu.Lock()
		defer n.host.mu.Unlock()
		for _, ex := range n.host.shards {
			ex.sched.mu.Lock()
			k := len(ex.sched.orphans)
			ex.sched.mu.Unlock()
			if k > 0 {
				return true
			}
		}
		return false
	})
	second := e.submit(task.SubmitRequest{Type: "counter", Entity: "e1", Input: input(sleepInput{MS: 10})})
	released := time.Now()
	close(gate.release)
	tk := <-first
	if tk == nil {
		t.FailNow()
	}
	e.final(second.Ref(), 20*time.Second)
	if got := e.final(tk.Ref(), 20*time.Second); got.Status != task.Completed {
		t.Fatalf("first task %s", got.Status)
	}
	runs := e.rec.All()
	if len(runs) != 2 || runs[0].TaskID != tk.ID || runs[1].TaskID != second.ID {
		t.Fatalf("runs %+v; want the first task, then the second", runs)
	}
	if runs[1].Start.Before(runs[0].End) {
		t.Fatal("the entity's tasks overlapped")
	}
	// A young orphan is looked at again at most 2 s apart (orphan's
	// backoff) and a reconciliation is a minute away: 5 s tells them
	// apart and leaves a loaded machine 3 s.
	if waited := runs[0].Start.Sub(released); waited > 5*time.Second {
		t.Fatalf("the first task started %s after its object was written", waited)
	} else {
		t.Logf("the first task started %s after its object was written", waited.Round(time.Millisecond))
	}
}

// TestEntityOrderUnderS3Faults: S3 fails for one task of an entity, first
// while the runner claims it, then while it commits its outcome (for longer
// than a task lease, so the commit is abandoned and the task runs again).
// Either way the task keeps its place: the entity's later task starts only
// after it has completed.
func TestEntityOrderUnderS3Faults(t *testing.T) {
	for _, phase := range []string{"claim", "commit"} {
		t.Run(phase, func(t *testing.T) {
			e := newEnv(t, 1)
			flaky := &flakyObjects{}
			e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
				flaky.ObjectStore = s
				return flaky
			}
			// The outage's length, not a synchronisation.
			healAfter := func(d time.Duration) { time.AfterFunc(d, func() { flaky.arm("", 0, 0) }) }
			const oneID, twoID = "order-one", "order-two"
			var armOnce sync.Once
			e.start("solo", func(n *node, h *Host) {
				if err := h.Register("counter", func(id string) (Entity, error) {
					return HandlerFunc(func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
						out, err := e.rec.work(ctx, n.id, tk, 0)
						if phase == "commit" && tk.ID == oneID {
							// The outage starts as the first task's handler
							// returns, and outlasts a task lease.
							armOnce.Do(func() {
								flaky.arm(oneID, 1<<20, 1<<20)
								healAfter(e.ecfg.TaskLease + 2*time.Second)
							})
						}
						return out, err
					}), nil
				}); err != nil {
					t.Fatal(err)
				}
			})
			e.waitOwned(10 * time.Second)
			if phase == "claim" {
				flaky.arm(oneID, 1<<20, 1<<20)
				healAfter(2 * time.Second)
			}
			one := e.submit(task.SubmitRequest{ID: oneID, Type: "counter", Entity: "e1", Input: input(sleepInput{MS: 1}), MaxAttempts: 10})
			two := e.submit(task.SubmitRequest{ID: twoID, Type: "counter", Entity: "e1", Input: input(sleepInput{MS: 2}), MaxAttempts: 10})
			for _, ref := range []string{one.Ref(), two.Ref()} {
				if got := e.final(ref, 30*time.Second); got.Status != task.Completed {
					t.Fatalf("%s ended %s", ref, got.Status)
				}
			}
			var lastOne, firstTwo *execution
			for _, x := range e.rec.All() {
				switch x.TaskID {
				case one.ID:
					lastOne = &x
				case two.ID:
					if firstTwo == nil {
						firstTwo = &x
					}
				}
			}
			if lastOne == nil || firstTwo == nil {
				t.Fatal("a task never ran")
			}
			if firstTwo.Start.Before(lastOne.End) {
				t.Fatalf("the second task started at %s, before the first one's last run ended at %s",
					firstTwo.Start.Format("05.000"), lastOne.End.Format("05.000"))
			}
			flaky.mu.Lock()
			failed := flaky.failed
			flaky.mu.Unlock()
			if failed == 0 {
				t.Fatal("no fault was injected")
			}
			t.Logf("%d S3 calls failed; the first task ran %d time(s)", failed, runsOf(e.rec, one.ID))
		})
	}
}

func runsOf(r *recorder, id string) int {
	n := 0
	for _, x := range r.All() {
		if x.TaskID == id {
			n++
		}
	}
	return n
}

// heldDeletes holds every Delete of a runner's object store until
// released, counting the ones waiting.
type heldDeletes struct {
	storage.ObjectStore
	release chan struct{}
	mu      sync.Mutex
	held    int
}

func (h *heldDeletes) Delete(ctx context.Context, key string) error {
	h.mu.Lock()
	h.held++
	h.mu.Unlock()
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.ObjectStore.Delete(ctx, key)
}

func (h *heldDeletes) waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// TestEntityNextTaskDoesNotWaitForPointerDelete: an entity's next task is
// claimed once the previous one's outcome is written, without waiting for
// the previous pointer's deletion (one S3 round trip off the path between
// an entity's tasks). With every pointer deletion held, all of an entity's
// tasks still complete, in order; released, the pointers go.
func TestEntityNextTaskDoesNotWaitForPointerDelete(t *testing.T) {
	e := newEnv(t, 1)
	held := &heldDeletes{release: make(chan struct{})}
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
		held.ObjectStore = s
		return held
	}
	e.start("solo", e.standard)
	e.waitOwned(10 * time.Second)
	var tasks []*task.Task
	for range 3 {
		tasks = append(tasks, e.submit(task.SubmitRequest{Type: "counter", Entity: "e1", Input: input(sleepInput{MS: 1})}))
	}
	for _, tk := range tasks {
		if got := e.final(tk.Ref(), 20*time.Second); got.Status != task.Completed {
			t.Fatalf("%s ended %s", tk.Ref(), got.Status)
		}
	}
	// Every deletion is held, none has returned: the entity's tasks did
	// not wait for their predecessors'. The last one's may still be on
	// its way to the store.
	testenv.WaitFor(t, "every task's pointer deletion to be under way", 10*time.Second, func() bool { return held.waiting() == len(tasks) })
	var prevEnd time.Time
	for i, x := range e.rec.All() {
		if x.TaskID != tasks[i].ID {
			t.Fatalf("run %d was %s, want %s (submission order)", i, x.TaskID, tasks[i].ID)
		}
		if x.Start.Before(prevEnd) {
			t.Fatalf("task %d started before the previous one ended", i)
		}
		prevEnd = x.End
	}
	close(held.release)
	for _, tk := range tasks {
		e.waitNoPointer(tk)
	}
}
