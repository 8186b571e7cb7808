package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// Committing writes an attempt's outcome by compare-and-swap (conclude,
// commitOutcome) and keeps the task's ready pointer in step with it
// (afterCommit, follow, dropPointer). Here too are the other ways a worker
// lets go of a pointer: put back after a store call failed (retryLater),
// or its task failed without running (failCorrupt, finishExhausted).

// change is the transition that commits an attempt's outcome. It is a
// value, not a closure, because commitOutcome applies it afresh to every
// version of the task it tries to write.
type change struct {
	// to is Completed, Cancelled (a cancel request honoured), Pending (put
	// back on a planned handoff) or Failed (retried or final, as Fail
	// decides).
	to        task.Status
	result    json.RawMessage // Completed: the handler's result
	err       error           // Failed: the attempt's error
	permanent bool            // Failed: no retry, whatever attempts are left
}

// apply makes the change to t in memory, at S3 time now.
func (c change) apply(t *task.Task, now time.Time) error {
	switch c.to {
	case task.Completed:
		return t.Complete(now, c.result)
	case task.Cancelled:
		return t.FinishCancel(now)
	case task.Pending:
		return t.Requeue(now, "shard handed over")
	}
	t.Fail(now, c.err, c.permanent)
	return nil
}

// outcome is the change's value of the outcome label once t, the task it
// changed, is committed: a failure is retried or final.
func (c change) outcome(t *task.Task) string {
	switch c.to {
	case task.Completed:
		return outcomeCompleted
	case task.Cancelled:
		return outcomeCancelled
	case task.Pending:
		return outcomeRequeued
	}
	if t.Status == task.Failed {
		return outcomeFailed
	}
	return outcomeRetried
}

// sameClaim reports whether b is the claim a (same runner, epoch, attempt
// claim time).
func sameClaim(a, b *task.Claim) bool {
	return a != nil && b != nil && a.RunnerID == b.RunnerID && a.Epoch == b.Epoch && a.ClaimedAt.Equal(b.ClaimedAt)
}

// sameLastEvent reports whether a and b end with the same transition (the
// same event by the same runner at the same S3 time, to the nanosecond): a
// task read after a write whose answer was lost is that write's if so.
func sameLastEvent(a, b *task.Task) bool {
	if len(a.History) == 0 || len(b.History) == 0 {
		return false
	}
	x, y := a.History[len(a.History)-1], b.History[len(b.History)-1]
	return x.Event == y.Event && x.Runner == y.Runner && x.Attempt == y.Attempt && x.At.Equal(y.At)
}

// conclude commits an attempt's outcome. cause is why its context ended,
// if it did.
func (p *pipeline) conclude(it *item, a *attempt, result json.RawMessage, herr, cause error) {
	typ := a.t.Type
	complete := change{to: task.Completed, result: result}
	finishCancel := change{to: task.Cancelled}
	if p.ctx.Err() != nil && !errors.Is(cause, errClaimLost) {
		// The shard is no longer ours. A planned handoff commits what the
		// handler finished and puts the rest back, while the lock is still
		// held; a loss leaves it all to the next owner's takeover.
		hctx := p.fate.await()
		switch {
		case hctx == nil:
			p.h.metrics.attempt(typ, outcomeAbandoned)
			p.s.forget(it.ptr.ID)
		case herr == nil:
			p.commitOutcome(hctx, it, a, complete)
		case errors.Is(cause, errCancelRequested):
			p.commitOutcome(hctx, it, a, finishCancel)
		default:
			p.commitOutcome(hctx, it, a, change{to: task.Pending})
		}
		return
	}
	switch {
	case errors.Is(cause, errClaimLost):
		p.h.metrics.attempt(typ, outcomeFenced)
		p.s.forget(it.ptr.ID)
	case herr == nil:
		// Done, even if a cancel request arrived meanwhile: the work
		// happened, and the task says so.
		p.commitOutcome(p.ctx, it, a, complete)
	case errors.Is(cause, errCancelRequested):
		p.commitOutcome(p.ctx, it, a, finishCancel)
	case errors.Is(cause, errEnforcedStop):
		// Stopped as the claim promised, while this runner (now in observe
		// or off mode) still owns the shard: its lease may be about to
		// expire, and a successor may take the task over at once. As a
		// detached runner would, leave the task alone; it is looked at
		// again, keeping its place, and claimed afresh here only once the
		// decision has re-attached (see decideRunning).
		p.h.metrics.attempt(typ, outcomeAbandoned)
		p.s.requeue(it, p.soon(time.Second))
	default:
		if errors.Is(cause, errTimeout) {
			herr = fmt.Errorf("%w after %s: %v", errTimeout, time.Duration(a.t.Timeout), herr)
		} else if errors.Is(cause, errLeaseExpiring) {
			herr = fmt.Errorf("%w: %v", errLeaseExpiring, herr)
		}
		p.commitOutcome(p.ctx, it, a, change{to: task.Failed, err: herr, permanent: IsPermanent(herr)})
	}
}

// commitOutcome writes an attempt's outcome with compare-and-swap, then
// maintains the ready pointer. A lost race re-reads the task: if the claim
// is still ours (a client only asked to cancel, say) the outcome is applied
// to the new version; if it is not, the commit is fenced off.
func (p *pipeline) commitOutcome(ctx context.Context, it *item, a *attempt, c change) {
	// base is the last version known to hold our claim; every try applies
	// the outcome to a fresh copy of it, so a failed write leaves nothing
	// behind that a later look could mistake for the stored state.
	base, etag := a.current()
	claim := base.Claim
	var tried *task.Task // the version last sent, whose answer may be lost
	// reload re-reads the task after a write whose fate is unknown or
	// refused. It reports done when nothing is left to write: the task is
	// terminal (the write landed though its answer was lost, or a client
	// finished it) and its pointer has been dealt with.
	reload := func(ctx context.Context) (done bool, err error) {
		fresh, fetag, err := p.h.tasks.Load(ctx, p.own.Shard, it.ptr.ID)
		if err != nil {
			return false, err // keep base: a retried CAS settles the question
		}
		if fresh.Status.IsTerminal() {
			if tried != nil && sameLastEvent(fresh, tried) {
				// Our write landed though its answer was lost: count
				// its outcome, as if it had been answered.
				p.h.metrics.attempt(fresh.Type, c.outcome(fresh))
			}
			p.afterCommit(ctx, it, fresh)
			return true, nil
		}
		base, etag = fresh, fetag
		return false, nil
	}
	// A write that fails for want of S3 is retried, backing off, for as
	// long as a task lease: giving up means running the task again. A
	// refused write (another version) is re-read a bounded number of times.
	start, pause, races := time.Now(), 200*time.Millisecond, 0
	var lastErr error
	for {
		if lastErr != nil && time.Since(start) > p.h.cfg.TaskLease {
			break
		}
		if ctx.Err() != nil && ctx == p.ctx {
			// The shard ended while committing. A planned handoff still
			// holds the lock: finish the commit in its window.
			if hctx := p.fate.await(); hctx != nil {
				ctx = hctx
				if done, _ := reload(ctx); done {
					return
				}
			}
		}
		if ctx.Err() != nil {
			// Detached or the handoff window closed: no write.
			p.h.metrics.attempt(base.Type, outcomeAbandoned)
			p.s.forget(it.ptr.ID)
			return
		}
		if !sameClaim(claim, base.Claim) || base.Status != task.Running {
			p.h.metrics.attempt(base.Type, outcomeFenced)
			p.h.log.InfoContext(a.logContext(), "task outcome fenced off: the task changed hands", "task", base.Ref())
			p.s.forget(it.ptr.ID)
			return
		}
		now, err := p.h.tasks.Now(ctx)
		if err != nil {
			lastErr = err
			p.pause(ctx, &pause)
			continue
		}
		t := base.Clone()
		if err := c.apply(t, now.Now); err != nil {
			p.h.log.WarnContext(a.logContext(), "cannot apply outcome", "task", t.Ref(), "err", err)
			p.s.forget(it.ptr.ID)
			return
		}
		if !t.Status.IsTerminal() && t.PointerKey() != it.ptr.Key {
			// A retry moves the task to a new pointer: write it first, so
			// that the task is never without the pointer that names it
			// (if the commit then fails, the new pointer is stale, and
			// whoever reads it drops it).
			if err := p.h.tasks.PutPointer(ctx, t); err != nil {
				lastErr = err
				p.h.log.WarnContext(a.logContext(), "writing a retried task's pointer failed; retrying", "task", t.Ref(), "err", err)
				p.pause(ctx, &pause)
				continue
			}
		}
		tried = t
		_, err = p.h.tasks.Write(ctx, t, etag)
		if err == nil {
			p.h.metrics.attempt(t.Type, c.outcome(t))
			p.afterCommit(ctx, it, t)
			return
		}
		lastErr = err
		if errors.Is(err, storage.ErrPrecondition) {
			p.h.metrics.claimRaces.Inc()
			if races++; races == 5 {
				break
			}
		} else {
			p.h.log.WarnContext(a.logContext(), "committing a task outcome failed; retrying", "task", t.Ref(), "err", err)
			p.pause(ctx, &pause)
		}
		if done, _ := reload(ctx); done {
			return
		}
	}
	// The task stays running under our claim; looking at its pointer again
	// shortly puts it back and runs it afresh.
	p.h.log.WarnContext(a.logContext(), "giving up committing a task outcome; the task will run again", "task", base.Ref(), "err", lastErr)
	p.h.metrics.attempt(base.Type, outcomeAbandoned)
	p.retryLater(it, lastErr)
}

// pause waits *d or until ctx ends, then doubles *d up to 2s.
func (p *pipeline) pause(ctx context.Context, d *time.Duration) {
	t := time.NewTimer(*d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	*d = min(2**d, 2*time.Second)
}

// afterCommit keeps the ready pointer in step: gone for a finished task, at
// the new due time for a retry (written by commitOutcome before the task,
// so the old one can go), unchanged for a requeue.
func (p *pipeline) afterCommit(ctx context.Context, it *item, t *task.Task) {
	old := it.ptr.Key
	switch {
	case t.Status.IsTerminal():
		p.dropAfterTurn(ctx, it)
	case t.PointerKey() != old:
		p.follow(ctx, it, t, false)
	default:
		p.s.forget(it.ptr.ID) // requeued in place: the next owner lists it
	}
}

// follow moves it from a pointer that no longer names t to t's current
// one, which exists: the old one is deleted (best effort: whoever reads it
// later deletes it again) and the item waits in the heap for the new due
// time, keeping its place in its entity's mailbox. stale says the old
// pointer was found stale (counted), not moved by this runner's commit.
func (p *pipeline) follow(ctx context.Context, it *item, t *task.Task, stale bool) {
	old := it.ptr.Key
	if err := p.h.tasks.DeletePointer(ctx, old); err != nil {
		p.h.log.Debug("deleting an old ready pointer failed; reconciliation will", "key", old, "err", err)
	} else if stale {
		p.h.metrics.stalePointers.Inc()
	}
	np, err := task.ParsePointer(t.PointerKey())
	if err != nil {
		p.s.forget(it.ptr.ID)
		return
	}
	it.ptr = np
	p.s.requeue(it, np.Due)
}

// retryLater puts a pointer back for a second after a transient failure.
func (p *pipeline) retryLater(it *item, err error) {
	if p.ctx.Err() != nil {
		p.s.forget(it.ptr.ID)
		return
	}
	p.h.log.Debug("task store unavailable; retrying the pointer shortly", "key", it.ptr.Key, "err", err)
	p.s.requeue(it, p.soon(time.Second))
}

// dropAfterTurn deletes the pointer of a task whose final outcome is
// committed once the worker has given back its slot and its entity's turn
// (see work), so that the entity's next task is claimed while the
// deletion is on the wire: one S3 round trip fewer between one task of an
// entity and the next. When too many deletions trail already (the
// runner's handler limit), it deletes at once, as before.
//
// Why it is safe: the task's fate is settled by the outcome's
// compare-and-swap, which has succeeded; the pointer only makes the task
// findable by a listing. Until it is gone the task id stays known, so this
// owner does not look at it again; if the deletion fails, or the shard
// changes hands first, the pointer is stale and whoever lists it reads a
// finished task and deletes it (actDrop), as after a crash at this point.
// An entity's next task still starts only after this one's outcome is
// written, so its order holds.
func (p *pipeline) dropAfterTurn(ctx context.Context, it *item) {
	if it.trail == nil {
		p.dropPointer(ctx, it, false)
		return
	}
	select {
	case p.h.trailing <- struct{}{}:
		it.trail.ctx = ctx
	default:
		p.dropPointer(ctx, it, false)
	}
}

// dropPointer deletes a pointer that has served its purpose. stale says
// it was found naming no live task (a finished task, a long-gone
// submission), which tenure_tasks_stale_pointers_total counts; the
// deletion that follows a task's own final commit is not counted.
func (p *pipeline) dropPointer(ctx context.Context, it *item, stale bool) {
	if err := p.h.tasks.DeletePointer(ctx, it.ptr.Key); err != nil {
		p.h.log.Debug("deleting a ready pointer failed; reconciliation will retry", "key", it.ptr.Key, "err", err)
	} else if stale {
		p.h.metrics.stalePointers.Inc()
	}
	p.s.forget(it.ptr.ID)
}

// failCorrupt moves a task whose object does not decode to failed, keeping
// its raw bytes in the object, so that its shard goes on and nothing is
// lost.
func (p *pipeline) failCorrupt(ctx context.Context, it *item, t *task.Task, etag string, cause error) {
	p.h.metrics.corrupt.Inc()
	p.h.log.Error("corrupt task object; moving it to failed with its bytes kept", "key", it.ptr.Key, "err", cause)
	if t == nil {
		p.s.forget(it.ptr.ID)
		return
	}
	now, err := p.h.tasks.Now(ctx)
	if err != nil {
		p.retryLater(it, err)
		return
	}
	t.MarkCorrupt(now.Now, cause)
	if _, err := p.h.tasks.Write(ctx, t, etag); err != nil {
		p.retryLater(it, err)
		return
	}
	p.dropPointer(ctx, it, false)
}

// finishExhausted fails a task that has no attempts left: a pending one
// whose last claim was lost with the runner that held it, or a running one
// left by a previous owner whose takeover would need another attempt.
func (p *pipeline) finishExhausted(ctx context.Context, it *item, t *task.Task, etag string) {
	now, err := p.h.tasks.Now(ctx)
	if err != nil {
		p.retryLater(it, err)
		return
	}
	t.Fail(now.Now, errors.New("attempts exhausted"), true)
	if _, err := p.h.tasks.Write(ctx, t, etag); err != nil {
		p.retryLater(it, err)
		return
	}
	p.h.metrics.attempt(t.Type, outcomeFailed)
	p.dropPointer(ctx, it, false)
}
