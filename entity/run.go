package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// Causes of a handler's context ending, besides the shard's own.
var (
	errCancelRequested = errors.New("entity: task cancel requested")
	errClaimLost       = errors.New("entity: task claim lost: another runner owns the task now")
	errLeaseExpiring   = errors.New("entity: task claim could not be renewed before it expires")
	errTimeout         = errors.New("entity: task attempt timed out")
	// errEnforcedStop: the attempt was claimed while the runner enforced
	// detachment, and the runner's detachment decision has detached since:
	// the claim promised to stop before the lease can expire, whatever
	// the runner's mode is now.
	errEnforcedStop = errors.New("entity: the runner's detachment decision detached; the attempt was claimed under enforcement and stops")
)

// attempt is one running task: its latest known object, for renewals and
// the commit.
type attempt struct {
	mu   sync.Mutex
	t    *task.Task
	etag string
	// expires is when the claim's lease expires at the earliest, on the
	// local clock (see localExpiry).
	expires time.Time
	pokec   chan struct{}
	cancel  context.CancelCauseFunc
	started time.Time // when the handler was called
}

// poke makes the renewal loop re-read the task now (a cancel request).
func (a *attempt) poke() {
	select {
	case a.pokec <- struct{}{}:
	default:
	}
}

func (a *attempt) current() (*task.Task, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.t, a.etag
}

func (a *attempt) set(t *task.Task, etag string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.t, a.etag = t, etag
}

func (a *attempt) expiry() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.expires
}

func (a *attempt) setExpiry(t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expires = t
}

// process claims and runs the task of one due pointer.
func (e *shardExec) process(it *item, box *mailbox) {
	ctx := e.ctx
	id := it.ptr.ID
	ci := task.ClaimInfo{RunnerID: e.h.runnerID, Epoch: e.own.Epoch, LeaseID: e.own.LeaseID, Lease: e.h.cfg.TaskLease}
	for tries := 0; ; tries++ {
		if ctx.Err() != nil {
			// Not owned any more: the next owner lists the pointer.
			e.forget(id)
			return
		}
		if tries == 5 {
			e.h.log.Warn("task keeps changing under its claim; retrying later", "task", it.ptr.Key)
			e.requeue(it, e.soon(time.Second))
			return
		}
		readAt := time.Now()
		now, err := e.h.tasks.Now(ctx)
		if err != nil {
			e.retryLater(it, err)
			return
		}
		if e.h.isActive(e.taskKey(id)) {
			// An earlier ownership's handler of this task ignores its
			// interruption and still runs here: never a second run.
			e.requeue(it, now.Latest().Add(500*time.Millisecond))
			return
		}
		t, etag, err := e.h.tasks.Load(ctx, e.own.Shard, id)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			if e.orphan(it, now) {
				continue
			}
			return
		case errors.Is(err, task.ErrCorrupt):
			e.failCorrupt(ctx, it, t, etag, err)
			return
		case err != nil:
			e.retryLater(it, err)
			return
		}
		e.mu.Lock()
		delete(e.orphans, id)
		delete(e.rewoken, id)
		e.mu.Unlock()
		if t.Status.IsTerminal() {
			e.dropPointer(ctx, it) // finished: its pointer is stale
			return
		}
		if t.PointerKey() != it.ptr.Key {
			// The task moved on (retried under a new pointer, replayed):
			// this pointer is stale. Its current one is written again
			// before this one goes, so that a task is never left without
			// a pointer, whatever wrote it and however that writer failed
			// (a runner before this version wrote the task first).
			if err := e.h.tasks.PutPointer(ctx, t); err != nil {
				e.retryLater(it, err)
				return
			}
			e.follow(ctx, it, t, true)
			return
		}
		// What this claim may promise: read now, bound to the attempt in
		// execute (see detachment.Enforcement).
		enf := e.enforcement()
		ci.Enforced = enf.Enforced
		switch t.Status {
		case task.Running:
			c := t.Claim
			if c != nil && c.Epoch > e.own.Epoch {
				// A newer owner has it: we are about to lose the shard.
				// The entity's later tasks wait with it.
				e.requeue(it, now.Latest().Add(time.Second))
				return
			}
			var terr error
			switch {
			case t.CancelRequested:
				// Its runner went before honouring the cancel: finish it.
				terr = t.FinishCancel(now.Now)
			case t.HeldBy(ci) && c.Enforced && enf.Ctx.Err() != nil:
				// Stopped here as its enforced claim promised, and the
				// detachment decision has not re-attached: a successor may
				// be taking it over. Look again later.
				e.requeue(it, now.Latest().Add(time.Second))
				return
			case t.HeldBy(ci):
				// Claimed by this runner and epoch before a detachment whose
				// handlers are gone: put it back and claim it afresh.
				terr = t.Requeue(now.Now, "orphaned by an earlier attachment of the same owner")
			case c != nil && !c.Enforced && now.Earliest().Before(c.LeaseExpiresAt):
				// Its holder did not promise to stop before its lease
				// expires (observe or off mode, or an older runner): it
				// may still run it, cut off from etcd but not from S3.
				// Wait out the claim in S3 time; the holder's renewals
				// push it further for as long as it runs.
				e.requeue(it, c.LeaseExpiresAt.Add(now.Latest().Sub(now.Earliest())))
				return
			default:
				reason := "left running by a previous owner"
				if c != nil {
					reason = fmt.Sprintf("left running by %s at epoch %d (now %d)", c.RunnerID, c.Epoch, e.own.Epoch)
					if c.Enforced {
						reason += ", which enforced detachment"
					} else {
						reason += ", claim lapsed"
					}
				}
				terr = t.TakeOver(now.Earliest(), ci, reason)
				if terr == nil {
					e.h.metrics.takeovers.Inc()
				}
			}
			if errors.Is(terr, task.ErrAttemptsExhausted) {
				e.finishExhausted(ctx, it, t, etag)
				return
			}
			if terr != nil {
				e.h.log.Warn("cannot take over task", "task", t.Ref(), "err", terr)
				e.forget(id)
				return
			}
			if t.Status != task.Running {
				// Cancelled or requeued: write that, then look again.
				if _, err := e.h.tasks.Write(ctx, t, etag); err != nil && !errors.Is(err, storage.ErrPrecondition) {
					e.retryLater(it, err)
					return
				}
				continue
			}
		case task.Pending:
			if _, ok := e.h.reg.lookup(t.Type); !ok {
				// Left pending for a runner that knows the type; looked at
				// again at the next reconciliation.
				e.h.metrics.unhandled.WithLabelValues(t.Type).Inc()
				e.h.log.Warn("no handler for task type; leaving the task pending", "task", t.Ref(), "type", t.Type)
				e.forget(id)
				return
			}
			if err := t.ClaimFor(now.Earliest(), ci); err != nil {
				var nd *task.NotDueError
				switch {
				case errors.As(err, &nd):
					// Dispatch compares the latest the S3 clock may read,
					// the claim the earliest: wait until the earliest
					// reaches the due time, not just the latest.
					e.requeue(it, nd.Due.Add(now.Latest().Sub(now.Earliest())))
				case errors.Is(err, task.ErrAttemptsExhausted):
					e.finishExhausted(ctx, it, t, etag)
				default:
					e.h.log.Warn("cannot claim task", "task", t.Ref(), "err", err)
					e.forget(id)
				}
				return
			}
		default:
			e.forget(id)
			return
		}
		newEtag, err := e.h.tasks.Write(ctx, t, etag)
		if errors.Is(err, storage.ErrPrecondition) {
			e.h.metrics.claimRaces.Inc()
			continue // someone changed it (a cancel, a replay): look again
		}
		if err != nil {
			e.retryLater(it, err)
			return
		}
		e.h.metrics.claims.Inc()
		e.execute(it, box, claimed{t: t, etag: newEtag, at: now, expires: localExpiry(readAt, now, ci.Lease), enf: enf})
		return
	}
}

// enforcement is what a claim made now may promise (see
// sharding.Ownership.Enforcement).
func (e *shardExec) enforcement() detachment.Enforcement {
	if e.own.Enforcement == nil {
		return detachment.Enforcement{Ctx: e.ctx}
	}
	return e.own.Enforcement()
}

// taskKey names a task across the runner's shards.
func (e *shardExec) taskKey(id string) string { return e.own.Shard.String() + "/" + id }

// claimed is what execute needs of a claim just written.
type claimed struct {
	t       *task.Task
	etag    string
	at      storage.ServerTime // the S3 time the claim was made at
	expires time.Time          // the claim's earliest local expiry
	enf     detachment.Enforcement
}

// execute runs a claimed task's handler and commits the outcome. An attempt
// whose claim promises enforcement is bound to the detachment decision that
// made the promise, so it stops before the lease can expire even if the
// runner leaves enforce mode meanwhile.
func (e *shardExec) execute(it *item, box *mailbox, c claimed) {
	t := c.t
	a := &attempt{t: t, etag: c.etag, expires: c.expires, pokec: make(chan struct{}, 1)}
	key := e.taskKey(t.ID)
	if !e.h.activate(key, a) {
		// Cannot happen while process checks first; never run twice.
		e.h.log.Error("task already running on this runner; leaving the claim to lapse", "task", t.Ref())
		e.forget(it.ptr.ID)
		return
	}
	defer e.h.deactivate(key, a)
	ent, err := e.instanceFor(box, t)
	if err != nil {
		e.conclude(it, a, nil, err, nil)
		return
	}
	hctx, cancel := context.WithCancelCause(e.ctx)
	defer cancel(nil)
	a.cancel = cancel
	if t.Claim != nil && t.Claim.Enforced {
		stop := context.AfterFunc(c.enf.Ctx, func() { cancel(errEnforcedStop) })
		defer stop()
	}
	if t.Timeout > 0 {
		var stop context.CancelFunc
		hctx, stop = context.WithTimeoutCause(hctx, time.Duration(t.Timeout), errTimeout)
		defer stop()
	}
	hctx, span := e.startSpan(hctx, t)
	defer span.End()

	a.started = time.Now()
	e.mu.Lock()
	e.inflight[t.ID] = a
	e.mu.Unlock()
	var renewing sync.WaitGroup
	renewing.Add(1)
	go func() {
		defer renewing.Done()
		e.renew(hctx, a)
	}()
	if !t.AvailableAt.After(t.CreatedAt) && t.Attempt == 1 {
		e.h.metrics.startLatency.Observe(c.at.Now.Sub(t.CreatedAt).Seconds())
	}
	view := t.Clone() // the handler's own copy: renewals change a.t
	var result json.RawMessage
	var herr error
	if hctx.Err() != nil {
		// Interrupted between the claim and the start: do not start.
		herr = context.Cause(hctx)
	} else {
		result, herr = safeHandle(hctx, ent, view)
	}
	e.h.metrics.duration.WithLabelValues(t.Type).Observe(time.Since(a.started).Seconds())
	cause := context.Cause(hctx)
	cancel(nil)
	renewing.Wait()
	e.mu.Lock()
	delete(e.inflight, t.ID)
	e.mu.Unlock()
	if box != nil {
		e.h.resident.touch(box.inst)
	}
	if herr != nil {
		span.RecordError(herr)
		span.SetStatus(codes.Error, herr.Error())
	}
	e.conclude(it, a, result, herr, cause)
}

// conclude commits an attempt's outcome. cause is why its context ended,
// if it did.
func (e *shardExec) conclude(it *item, a *attempt, result json.RawMessage, herr, cause error) {
	typ := a.t.Type
	complete := func(t *task.Task, now time.Time) error { return t.Complete(now, result) }
	finishCancel := func(t *task.Task, now time.Time) error { return t.FinishCancel(now) }
	if e.ctx.Err() != nil && !errors.Is(cause, errClaimLost) {
		// The shard is no longer ours. A planned handoff commits what the
		// handler finished and puts the rest back, while the lock is still
		// held; a loss leaves it all to the next owner's takeover.
		hctx := e.awaitFate()
		switch {
		case hctx == nil:
			e.h.metrics.tasks.WithLabelValues(typ, outcomeAbandoned).Inc()
			e.forget(it.ptr.ID)
		case herr == nil:
			e.commitOutcome(hctx, it, a, complete, outcomeCompleted)
		case errors.Is(cause, errCancelRequested):
			e.commitOutcome(hctx, it, a, finishCancel, outcomeCancelled)
		default:
			e.commitOutcome(hctx, it, a, func(t *task.Task, now time.Time) error { return t.Requeue(now, "shard handed over") }, outcomeRequeued)
		}
		return
	}
	switch {
	case errors.Is(cause, errClaimLost):
		e.h.metrics.tasks.WithLabelValues(typ, outcomeFenced).Inc()
		e.forget(it.ptr.ID)
	case herr == nil:
		// Done, even if a cancel request arrived meanwhile: the work
		// happened, and the task says so.
		e.commitOutcome(e.ctx, it, a, complete, outcomeCompleted)
	case errors.Is(cause, errCancelRequested):
		e.commitOutcome(e.ctx, it, a, finishCancel, outcomeCancelled)
	case errors.Is(cause, errEnforcedStop):
		// Stopped as the claim promised, while this runner (now in observe
		// or off mode) still owns the shard: its lease may be about to
		// expire, and a successor may take the task over at once. As a
		// detached runner would, leave the task alone; it is looked at
		// again, keeping its place, and claimed afresh here only once the
		// decision has re-attached (see process).
		e.h.metrics.tasks.WithLabelValues(typ, outcomeAbandoned).Inc()
		e.requeue(it, e.soon(time.Second))
	default:
		if errors.Is(cause, errTimeout) {
			herr = fmt.Errorf("%w after %s: %v", errTimeout, time.Duration(a.t.Timeout), herr)
		} else if errors.Is(cause, errLeaseExpiring) {
			herr = fmt.Errorf("%w: %v", errLeaseExpiring, herr)
		}
		permanent := IsPermanent(herr)
		e.commitOutcome(e.ctx, it, a, func(t *task.Task, now time.Time) error {
			t.Fail(now, herr, permanent)
			return nil
		}, "")
	}
}

// commitOutcome writes an attempt's outcome with compare-and-swap, then
// maintains the ready pointer. A lost race re-reads the task: if the claim
// is still ours (a client only asked to cancel, say) the outcome is applied
// to the new version; if it is not, the commit is fenced off. outcome ""
// means "read it from the committed status" (a failure: retried or final).
func (e *shardExec) commitOutcome(ctx context.Context, it *item, a *attempt, apply func(*task.Task, time.Time) error, outcome string) {
	// base is the last version known to hold our claim; every try applies
	// the outcome to a fresh copy of it, so a failed write leaves nothing
	// behind that a later look could mistake for the stored state.
	base, etag := a.current()
	claim := base.Claim
	// reload re-reads the task after a write whose fate is unknown or
	// refused. It reports done when nothing is left to write: the task is
	// terminal (the write landed though its answer was lost, or a client
	// finished it) and its pointer has been dealt with.
	reload := func(ctx context.Context) (done bool, err error) {
		fresh, fetag, err := e.h.tasks.Load(ctx, e.own.Shard, it.ptr.ID)
		if err != nil {
			return false, err // keep base: a retried CAS settles the question
		}
		if fresh.Status.IsTerminal() {
			e.afterCommit(ctx, it, fresh)
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
		if lastErr != nil && time.Since(start) > e.h.cfg.TaskLease {
			break
		}
		if ctx.Err() != nil && ctx == e.ctx {
			// The shard ended while committing. A planned handoff still
			// holds the lock: finish the commit in its window.
			if hctx := e.awaitFate(); hctx != nil {
				ctx = hctx
				if done, _ := reload(ctx); done {
					return
				}
			}
		}
		if ctx.Err() != nil {
			// Detached or the handoff window closed: no write.
			e.h.metrics.tasks.WithLabelValues(base.Type, outcomeAbandoned).Inc()
			e.forget(it.ptr.ID)
			return
		}
		if !sameClaim(claim, base.Claim) || base.Status != task.Running {
			e.h.metrics.tasks.WithLabelValues(base.Type, outcomeFenced).Inc()
			e.h.log.Info("task outcome fenced off: the task changed hands", "task", base.Ref())
			e.forget(it.ptr.ID)
			return
		}
		now, err := e.h.tasks.Now(ctx)
		if err != nil {
			lastErr = err
			e.pause(ctx, &pause)
			continue
		}
		t := base.Clone()
		if err := apply(t, now.Now); err != nil {
			e.h.log.Warn("cannot apply outcome", "task", t.Ref(), "err", err)
			e.forget(it.ptr.ID)
			return
		}
		if !t.Status.IsTerminal() && t.PointerKey() != it.ptr.Key {
			// A retry moves the task to a new pointer: write it first, so
			// that the task is never without the pointer that names it
			// (if the commit then fails, the new pointer is stale, and
			// whoever reads it drops it).
			if err := e.h.tasks.PutPointer(ctx, t); err != nil {
				lastErr = err
				e.h.log.Warn("writing a retried task's pointer failed; retrying", "task", t.Ref(), "err", err)
				e.pause(ctx, &pause)
				continue
			}
		}
		_, err = e.h.tasks.Write(ctx, t, etag)
		if err == nil {
			if outcome == "" {
				outcome = outcomeRetried
				if t.Status == task.Failed {
					outcome = outcomeFailed
				}
			}
			e.h.metrics.tasks.WithLabelValues(t.Type, outcome).Inc()
			e.afterCommit(ctx, it, t)
			return
		}
		lastErr = err
		if errors.Is(err, storage.ErrPrecondition) {
			e.h.metrics.claimRaces.Inc()
			if races++; races == 5 {
				break
			}
		} else {
			e.h.log.Warn("committing a task outcome failed; retrying", "task", t.Ref(), "err", err)
			e.pause(ctx, &pause)
		}
		if done, _ := reload(ctx); done {
			return
		}
	}
	// The task stays running under our claim; looking at its pointer again
	// shortly puts it back and runs it afresh.
	e.h.log.Warn("giving up committing a task outcome; the task will run again", "task", base.Ref(), "err", lastErr)
	e.h.metrics.tasks.WithLabelValues(base.Type, outcomeAbandoned).Inc()
	e.retryLater(it, lastErr)
}

// pause waits *d or until ctx ends, then doubles *d up to 2s.
func (e *shardExec) pause(ctx context.Context, d *time.Duration) {
	t := time.NewTimer(*d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	*d = min(2**d, 2*time.Second)
}

// sameClaim reports whether b is the claim a (same runner, epoch, attempt
// claim time).
func sameClaim(a, b *task.Claim) bool {
	return a != nil && b != nil && a.RunnerID == b.RunnerID && a.Epoch == b.Epoch && a.ClaimedAt.Equal(b.ClaimedAt)
}

// afterCommit keeps the ready pointer in step: gone for a finished task, at
// the new due time for a retry (written by commitOutcome before the task,
// so the old one can go), unchanged for a requeue.
func (e *shardExec) afterCommit(ctx context.Context, it *item, t *task.Task) {
	old := it.ptr.Key
	switch {
	case t.Status.IsTerminal():
		e.dropPointer(ctx, it)
	case t.PointerKey() != old:
		e.follow(ctx, it, t, false)
	default:
		e.forget(it.ptr.ID) // requeued in place: the next owner lists it
	}
}

// follow moves it from a pointer that no longer names t to t's current
// one, which exists: the old one is deleted (best effort: whoever reads it
// later deletes it again) and the item waits in the heap for the new due
// time, keeping its place in its entity's mailbox. stale says the old
// pointer was found stale (counted), not moved by this runner's commit.
func (e *shardExec) follow(ctx context.Context, it *item, t *task.Task, stale bool) {
	old := it.ptr.Key
	if err := e.h.tasks.DeletePointer(ctx, old); err != nil {
		e.h.log.Debug("deleting an old ready pointer failed; reconciliation will", "key", old, "err", err)
	} else if stale {
		e.h.metrics.stalePointers.Inc()
	}
	p, err := task.ParsePointer(t.PointerKey())
	if err != nil {
		e.forget(it.ptr.ID)
		return
	}
	it.ptr = p
	e.requeue(it, p.Due)
}

// renew extends the running task's claim every TaskLease/3 and re-reads it
// when poked; it cancels the handler when the task is cancelled, the claim
// lost, or the claim about to expire.
//
// The last is a guard on the local clock, armed for half a renewal period
// before the claim's earliest local expiry (see attempt.expires) and pushed
// by each renewal: it holds when S3, and with it the S3 clock, cannot be
// reached, and while a renewal hangs, and it leaves the handler half a
// period to stop before another runner may claim the task. Renewals come
// every period, or sooner when the S3 clock's uncertainty leaves the guard
// closer than two periods away (short leases).
func (e *shardExec) renew(hctx context.Context, a *attempt) {
	every := e.h.cfg.TaskLease / 3
	margin := every / 2
	guard := time.AfterFunc(time.Until(a.expiry().Add(-margin)), func() { a.cancel(errLeaseExpiring) })
	defer guard.Stop()
	// next is the wait before the next renewal try: a period, or half the
	// time left before the guard fires.
	next := func(most time.Duration) time.Duration {
		return max(min(most, time.Until(a.expiry().Add(-margin))/2), time.Millisecond)
	}
	timer := time.NewTimer(next(every))
	defer timer.Stop()
	for {
		poked := false
		select {
		case <-hctx.Done():
			return
		case <-timer.C:
		case <-a.pokec:
			poked = true
		}
		t, etag := a.current()
		claim := t.Claim
		readAt := time.Now()
		now, err := e.h.tasks.Now(hctx)
		if err == nil && !poked {
			renewed := t.Clone()
			if err = renewed.Renew(now.Earliest(), e.h.cfg.TaskLease); err == nil {
				var newEtag string
				if newEtag, err = e.h.tasks.Write(hctx, renewed, etag); err == nil {
					a.set(renewed, newEtag)
					exp := localExpiry(readAt, now, e.h.cfg.TaskLease)
					a.setExpiry(exp)
					guard.Reset(time.Until(exp.Add(-margin)))
					timer.Reset(next(every))
					continue
				}
			}
		}
		if poked || errors.Is(err, storage.ErrPrecondition) {
			fresh, fetag, lerr := e.h.tasks.Load(hctx, e.own.Shard, t.ID)
			switch {
			case lerr != nil:
				err = lerr
			case !sameClaim(claim, fresh.Claim) || fresh.Status != task.Running:
				a.cancel(errClaimLost)
				return
			default:
				a.set(fresh, fetag)
				if fresh.CancelRequested {
					a.cancel(errCancelRequested)
					return
				}
				if poked {
					continue
				}
				// Another writer (a client's request) changed the task
				// under our claim: renew on the new version now.
				timer.Reset(time.Millisecond)
				continue
			}
		}
		// A failed renewal is retried every second, or sooner as the guard
		// nears, until the guard gives up on the claim.
		timer.Reset(next(min(every, time.Second)))
	}
}

// localExpiry is when, on the local clock, a claim written with the S3 time
// now (read at local time readAt) for lease expires at the earliest: the S3
// clock may have been ahead of now.Earliest() by up to the estimate's width.
func localExpiry(readAt time.Time, now storage.ServerTime, lease time.Duration) time.Time {
	return readAt.Add(lease - now.Latest().Sub(now.Earliest()))
}

// instanceFor returns the entity instance for t: the mailbox's resident one
// (created on the first task), or a fresh one for an entity-less task.
func (e *shardExec) instanceFor(box *mailbox, t *task.Task) (Entity, error) {
	f, ok := e.h.reg.lookup(t.Type)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoHandler, t.Type)
	}
	if box == nil {
		return newEntity(f, t.Entity)
	}
	e.mu.Lock()
	in := box.inst
	e.mu.Unlock()
	if in != nil && in.typ == t.Type && in.id == t.Entity {
		e.h.resident.touch(in)
		return in.ent, nil
	}
	if in != nil {
		// Two entities share the mailbox's key (a hash collision): the
		// resident one makes room.
		e.passivateBusy(box, in)
	}
	ent, err := newEntity(f, t.Entity)
	if err != nil {
		return nil, err
	}
	if s, ok := ent.(Starter); ok {
		ctx, cancel := context.WithTimeout(e.ctx, e.h.cfg.HookTimeout)
		err := safeHook(func() error { return s.OnStart(ctx) })
		cancel()
		if err != nil {
			return nil, fmt.Errorf("entity %s/%s: OnStart: %w", t.Type, t.Entity, err)
		}
	}
	in = &instance{typ: t.Type, id: t.Entity, ent: ent, box: box, exec: e}
	e.mu.Lock()
	box.inst = in
	e.mu.Unlock()
	e.h.resident.add(e.h, in)
	return ent, nil
}

// passivateBusy stops the resident instance of a mailbox its worker holds.
func (e *shardExec) passivateBusy(box *mailbox, in *instance) {
	e.mu.Lock()
	if box.inst == in {
		box.inst = nil
	}
	e.mu.Unlock()
	e.h.stopInstance(context.Background(), in, StopEvicted)
}

func newEntity(f Factory, id string) (ent Entity, err error) {
	err = safeHook(func() error {
		var ferr error
		ent, ferr = f(id)
		return ferr
	})
	if err == nil && ent == nil {
		err = errors.New("factory returned no entity")
	}
	return ent, err
}

// safeHandle runs the handler, turning a panic into a *PanicError.
func safeHandle(ctx context.Context, ent Entity, t *task.Task) (result json.RawMessage, err error) {
	defer func() {
		if v := recover(); v != nil {
			result, err = nil, &PanicError{Value: v, Stack: string(debug.Stack())}
		}
	}()
	result, err = ent.Handle(ctx, t)
	if err == nil && len(result) > 0 && !json.Valid(result) {
		err = Permanent(fmt.Errorf("entity: handler result is not valid JSON (%d bytes)", len(result)))
	}
	return result, err
}

func safeHook(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: string(debug.Stack())}
		}
	}()
	return f()
}

// retryLater puts a pointer back for a second after a transient failure.
func (e *shardExec) retryLater(it *item, err error) {
	if e.ctx.Err() != nil {
		e.forget(it.ptr.ID)
		return
	}
	e.h.log.Debug("task store unavailable; retrying the pointer shortly", "key", it.ptr.Key, "err", err)
	e.requeue(it, e.soon(time.Second))
}

// soon returns d from now on the S3 clock the due heap runs on (the local
// clock when there is no estimate of it).
func (e *shardExec) soon(d time.Duration) time.Time {
	if now, err := e.h.tasks.Now(e.ctx); err == nil {
		return now.Latest().Add(d)
	}
	return time.Now().Add(d)
}

// orphan handles a pointer whose task object does not exist. The submitter
// writes the pointer first and the object right after, so a young one is
// most likely a submission in progress: it is looked at again shortly, with
// backoff, keeping its place at the head of its entity's mailbox, for up to
// OrphanWait. Past that the submission is taken to have failed and the
// entity's later tasks go ahead; the pointer is deleted once it is
// OrphanPointerAge old. orphan reports whether to look again at once: a
// wake-up for the pointer came while it was being looked at, and a
// submitter wakes the owner only after writing the object, so the object
// exists now. A wake-up that comes while the pointer waits in the heap
// makes it due at once (see onWake).
func (e *shardExec) orphan(it *item, now storage.ServerTime) (again bool) {
	id := it.ptr.ID
	e.mu.Lock()
	if e.rewoken[id] {
		delete(e.rewoken, id)
		e.mu.Unlock()
		return true
	}
	first, seen := e.orphans[id]
	if !seen {
		first = time.Now()
		e.orphans[id] = first
	}
	age := time.Since(first)
	switch {
	case age < e.h.cfg.OrphanWait:
		e.mu.Unlock()
		e.requeue(it, now.Latest().Add(min(max(age/2, 100*time.Millisecond), 2*time.Second)))
		return false
	case age < e.h.cfg.OrphanPointerAge:
		// Its wake-up, if the object still comes, or the next
		// reconciliation brings it back.
		delete(e.known, id)
		e.mu.Unlock()
		return false
	}
	delete(e.orphans, id)
	e.mu.Unlock()
	e.dropPointer(e.ctx, it)
	return false
}

// dropPointer deletes a pointer that has served its purpose.
func (e *shardExec) dropPointer(ctx context.Context, it *item) {
	if err := e.h.tasks.DeletePointer(ctx, it.ptr.Key); err != nil {
		e.h.log.Debug("deleting a ready pointer failed; reconciliation will retry", "key", it.ptr.Key, "err", err)
	} else {
		e.h.metrics.stalePointers.Inc()
	}
	e.forget(it.ptr.ID)
}

// failCorrupt moves a task whose object does not decode to failed, keeping
// its raw bytes in the object, so that its shard goes on and nothing is
// lost.
func (e *shardExec) failCorrupt(ctx context.Context, it *item, t *task.Task, etag string, cause error) {
	e.h.metrics.corrupt.Inc()
	e.h.log.Error("corrupt task object; moving it to failed with its bytes kept", "key", it.ptr.Key, "err", cause)
	if t == nil {
		e.forget(it.ptr.ID)
		return
	}
	now, err := e.h.tasks.Now(ctx)
	if err != nil {
		e.retryLater(it, err)
		return
	}
	t.MarkCorrupt(now.Now, cause)
	if _, err := e.h.tasks.Write(ctx, t, etag); err != nil {
		e.retryLater(it, err)
		return
	}
	e.dropPointer(ctx, it)
}

// finishExhausted fails a pending task that has no attempts left (its last
// claim was lost with the runner that held it).
func (e *shardExec) finishExhausted(ctx context.Context, it *item, t *task.Task, etag string) {
	now, err := e.h.tasks.Now(ctx)
	if err != nil {
		e.retryLater(it, err)
		return
	}
	t.Fail(now.Now, errors.New("attempts exhausted"), true)
	if _, err := e.h.tasks.Write(ctx, t, etag); err != nil {
		e.retryLater(it, err)
		return
	}
	e.h.metrics.tasks.WithLabelValues(t.Type, outcomeFailed).Inc()
	e.dropPointer(ctx, it)
}

// startSpan starts the execute span as a child of the submit span whose
// context the task carries.
func (e *shardExec) startSpan(ctx context.Context, t *task.Task) (context.Context, trace.Span) {
	if t.Trace != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": t.Trace})
	}
	return e.h.tracer.Start(ctx, "tenure.task.execute",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("tenure.task.id", t.ID),
			attribute.String("tenure.task.type", t.Type),
			attribute.String("tenure.task.entity", t.Entity),
			attribute.String("tenure.shard", t.Shard.String()),
			attribute.Int("tenure.task.attempt", t.Attempt),
			attribute.Int64("tenure.shard.epoch", e.own.Epoch),
		))
}
