package entity

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/storage"
)

// TestAttachedHoldsUnboundWork: work not bound to a detachment decision
// (a claim made while the runner was detached is not enforced) is refused
// at its start while the runner is detached in enforce mode
// (Enforcement.Hold), before the shard's own context ends; in observe
// mode (no Hold) it goes on. This is the soak's pause case: a handler
// started 1.3 s past a paused runner's lease, 42 ms before the manager
// stopped the shard.
func TestAttachedHoldsUnboundWork(t *testing.T) {
	detached := errors.New("test: detached at the lease deadline")
	dctx, cancel := context.WithCancelCause(context.Background())
	cancel(detached)
	for _, hold := range []bool{true, false} {
		r := &shardRef{ctx: context.Background(), own: sharding.Ownership{Enforcement: func() detachment.Enforcement {
			return detachment.Enforcement{Ctx: dctx, Hold: hold}
		}}}
		err := Attached(r.withAttachmentCheck(context.Background(), nil))
		switch {
		case hold && !errors.Is(err, detached):
			t.Fatalf("held (enforce mode, detached): Attached = %v, want the detachment", err)
		case !hold && err != nil:
			t.Fatalf("not held (observe mode): Attached = %v, want nil: work goes on", err)
		}
	}
}

// taskObjectOps counts the reads and writes of one task's object (its key
// set once the task is submitted), below the runner's task store.
type taskObjectOps struct {
	storage.ObjectStore
	key            atomic.Pointer[string]
	gets, writes   atomic.Int32
	writeAfterGets atomic.Int32 // gets seen before the first write
}

func (o *taskObjectOps) is(key string) bool {
	k := o.key.Load()
	return k != nil && *k == key
}

func (o *taskObjectOps) wrote(key string) {
	if o.is(key) && o.writes.Add(1) == 1 {
		o.writeAfterGets.Store(o.gets.Load())
	}
}

func (o *taskObjectOps) Get(ctx context.Context, key string) (storage.Object, error) {
	obj, err := o.ObjectStore.Get(ctx, key)
	if o.is(key) {
		o.gets.Add(1)
	}
	return obj, err
}

func (o *taskObjectOps) Put(ctx context.Context, key string, body []byte) (string, error) {
	o.wrote(key)
	return o.ObjectStore.Put(ctx, key, body)
}

func (o *taskObjectOps) Replace(ctx context.Context, key string, body []byte, ifMatch string) (string, error) {
	o.wrote(key)
	return o.ObjectStore.Replace(ctx, key, body, ifMatch)
}

// TestHeldRunnerWritesNoClaim: a runner detached in enforce mode
// (Enforcement.Hold) whose shard's context has not ended yet — the moment
// between the detachment and the manager's handling of it, or a process
// resumed after a pause past its lease — looks at a due task and writes no
// claim: a claim made then could not be enforced, so a successor would
// have to wait for it to lapse, for a handler the start check refuses
// anyway. Attached again, the runner claims the task and runs it once.
// Before the fix the claim was written while held (and its handler then
// refused at its start).
func TestHeldRunnerWritesNoClaim(t *testing.T) {
	e := newEnv(t, 1)
	ops := &taskObjectOps{}
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
		ops.ObjectStore = s
		return ops
	}
	var ran atomic.Int32
	b := e.bareHost(func(h *Host) {
		if err := h.RegisterFunc("job", func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			if err := Attached(ctx); err != nil {
				return nil, err
			}
			ran.Add(1)
			return json.RawMessage(`{}`), nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	detached := errors.New("test: detached at the lease deadline")
	dctx, dcancel := context.WithCancelCause(context.Background())
	dcancel(detached)
	var enf atomic.Pointer[detachment.Enforcement]
	enf.Store(&detachment.Enforcement{Ctx: dctx, Hold: true})
	ctx, cancel := context.WithCancelCause(context.Background())
	shard := storage.ShardID{Group: storage.DefaultGroup, Index: 0}
	own := sharding.Ownership{Shard: shard, Epoch: 7, LeaseID: 1, Since: time.Now(), Ctx: ctx,
		Enforcement: func() detachment.Enforcement { return *enf.Load() }}
	t.Cleanup(func() {
		cancel(&sharding.LostError{Shard: shard, Epoch: 7, Reason: sharding.LossStopped})
		b.ShardLost(own, sharding.LossStopped)
	})

	// Submitted before the host owns the shard: its acquisition listing
	// finds the pointer, and every look reads the task (a wake-up's hint
	// would spare the read, and the reads are what the test counts).
	tk := e.submit(task.SubmitRequest{Type: "job", Input: json.RawMessage(`{}`)})
	if tk.Shard != shard {
		t.Fatalf("task in shard %s, want %s", tk.Shard, shard)
	}
	key := task.TaskKey(shard, tk.ID)
	ops.key.Store(&key)
	b.ShardAcquired(own)

	// Two looks: the first one's decision is over once the second
	// begins (a held look waits a second before the next).
	testenv.WaitFor(t, "the held runner's second look at the task", 30*time.Second, func() bool { return ops.gets.Load() >= 2 })
	if n := ops.writes.Load(); n != 0 {
		t.Fatalf("held (enforce mode, detached): %d writes of the task object after %d looks, want none (no claim while held)", n, ops.writeAfterGets.Load())
	}
	got, err := e.client.Get(ctxFor(t, 10*time.Second), tk.Ref())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != task.Pending || got.Claim != nil || ran.Load() != 0 {
		t.Fatalf("held: task %s status %s, claim %+v, handler ran %d times; want pending, unclaimed, not run", tk.Ref(), got.Status, got.Claim, ran.Load())
	}

	live, liveCancel := context.WithCancelCause(context.Background())
	defer liveCancel(nil)
	enf.Store(&detachment.Enforcement{Ctx: live, Enforced: true})
	done := e.final(tk.Ref(), 30*time.Second)
	if done.Status != task.Completed || ran.Load() != 1 {
		t.Fatalf("attached again: task %s %s, handler ran %d times; want completed, once", tk.Ref(), done.Status, ran.Load())
	}
}
