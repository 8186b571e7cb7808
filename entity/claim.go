package entity

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// Claiming turns a due ready pointer into a running attempt. A worker looks
// at the pointer's task (look) and acts on what the look decided, a
// verdict (act), looking again for as long as the verdict asks. A look
// only reads (the S3 clock, the task object, the executor's own state) and
// decides; every write to S3 happens in act, the one place verdicts are
// carried out. In order, a look decides:
//
//   - the shard is no longer owned: forget the pointer (the next owner
//     lists it);
//   - five looks did not settle the task (it keeps changing under us): put
//     the pointer back for a second;
//   - the S3 clock or the task cannot be read: retry in a second;
//   - an earlier ownership's handler of the task still runs here: wait;
//   - no task object (an orphan, most likely a submission in progress):
//     look again at once if its wake-up came meanwhile, wait with backoff
//     while it is young, leave it to its wake-up or the next
//     reconciliation, and delete the pointer once it is old;
//   - the object does not decode: fail the task in place, bytes kept;
//   - the task is finished: delete the pointer;
//   - the task names another pointer (this one is stale): write its
//     current pointer, delete this one and follow the task to the current
//     one;
//   - running, under a newer epoch's claim: wait (we are about to lose the
//     shard); with a cancel request: finish the cancel, write it, look
//     again; under our own enforced claim while our detachment decision is
//     detached: wait; under our own claim otherwise: put it back to
//     pending, write it, look again; under an unenforced claim that may
//     not have lapsed: wait until it has; otherwise: take it over (claim);
//   - pending: leave it for a runner that knows its type, wait until it is
//     due, fail it if its attempts are used up, or claim it;
//   - any other status: forget it.
//
// A claim is written by compare-and-swap: a lost race looks again (a
// cancel or a replay came in between); a won one runs the handler
// (execute.go), whose outcome is committed in commit.go.

// action is what a look at a pointer decided to do with it.
type action int

const (
	actLookAgain     action = iota + 1 // read the task again at once
	actWait                            // put the pointer back in the heap until at
	actRetry                           // a store call failed (err): put the pointer back for a second
	actForget                          // drop the task from the known set; its pointer stays
	actParked                          // nothing more: the look dropped it from the known set itself (see orphan)
	actDrop                            // delete the pointer, which names no live task, and forget it
	actRestore                         // the pointer is stale: write t's current pointer, then follow t to it
	actFailCorrupt                     // t does not decode (err): fail it in place, bytes kept
	actFailExhausted                   // t has no attempts left: fail it
	actWrite                           // write t (cancelled or requeued), then look again
	actClaim                           // write t's claim, then run it
)

// verdict is what a look decided: an action and what it needs.
type verdict struct {
	do   action
	at   time.Time  // actWait: when the pointer is due again
	err  error      // actRetry: the store's error; actFailCorrupt: the decode error
	t    *task.Task // the task as read, changed in memory for actWrite and actClaim
	etag string     // the ETag t was read with
	run  claimed    // actClaim: what execute needs besides the task and its new ETag
}

// waitUntil puts the pointer back in the due heap until at; an entity's
// task keeps its place at the head of its mailbox.
func waitUntil(at time.Time) verdict { return verdict{do: actWait, at: at} }

// retry puts the pointer back for a second after a store call failed.
func retry(err error) verdict { return verdict{do: actRetry, err: err} }

// seen is what one look read of a pointer's task.
type seen struct {
	t      *task.Task
	etag   string
	now    storage.ServerTime // the S3 time read before the task
	readAt time.Time          // the local time now was read at
	enf    detachment.Enforcement
	ci     task.ClaimInfo // the claim this look would write, Enforced per enf
}

// claim claims the task as changed in memory (claimed or taken over).
func (s *seen) claim() verdict {
	return verdict{do: actClaim, t: s.t, etag: s.etag, run: claimed{
		at:      s.now,
		expires: localExpiry(s.readAt, s.now, s.ci.Lease),
		enf:     s.enf,
	}}
}

// failExhausted fails the task, which has no attempts left.
func (s *seen) failExhausted() verdict {
	return verdict{do: actFailExhausted, t: s.t, etag: s.etag}
}

// hintKeep is how far off a pointer's due time may be for its wake-up hint
// to be kept while it waits: the S3 clock's uncertainty makes a task
// submitted for now look due a few milliseconds late; a task delayed
// further is read when it falls due, and its hint does not sit in memory.
const hintKeep = time.Second

// pipeline runs the attempts of a shard's tasks, one due pointer at a time
// per worker: look and claim (this file), execute and renew (execute.go),
// commit (commit.go). The scheduler sees it only as a taskRunner; it
// asks the scheduler to put pointers back (requeue), forget them, and
// residency for the instance an attempt runs on. Each attempt moves
// through attemptStage (execute.go).
type pipeline struct {
	shardRef
	s    *scheduler
	res  *residency
	fate *fate
}

// process claims and runs the task of one due pointer.
func (p *pipeline) process(it *item, box *mailbox) {
	for tries := 0; ; tries++ {
		if !p.act(it, box, p.look(it, tries)) {
			return
		}
	}
}

// act carries out a verdict on the pointer it and reports whether to look
// again.
func (p *pipeline) act(it *item, box *mailbox, v verdict) (again bool) {
	ctx := p.ctx
	switch v.do {
	case actLookAgain:
		return true
	case actWait:
		p.s.requeue(it, v.at)
	case actRetry:
		p.retryLater(it, v.err)
	case actForget:
		p.s.forget(it.ptr.ID)
	case actParked:
		// Nothing left: orphan did it under the lock it decided under.
	case actDrop:
		p.dropPointer(ctx, it, true)
	case actRestore:
		// The stale pointer's task moved on: its current pointer is
		// written again before this one goes (see decideTask).
		if err := p.h.tasks.PutPointer(ctx, v.t); err != nil {
			p.retryLater(it, err)
			return false
		}
		p.follow(ctx, it, v.t, true)
	case actFailCorrupt:
		p.failCorrupt(ctx, it, v.t, v.etag, v.err)
	case actFailExhausted:
		p.finishExhausted(ctx, it, v.t, v.etag)
	case actWrite:
		// Cancelled or requeued: write that, then look again (at what
		// changed meanwhile, if the write lost a race).
		if _, err := p.h.tasks.Write(ctx, v.t, v.etag); err != nil && !errors.Is(err, storage.ErrPrecondition) {
			p.retryLater(it, err)
			return false
		}
		return true
	case actClaim:
		return p.claim(it, box, v)
	}
	return false
}

// claim writes the claim a look decided on, by compare-and-swap, and runs
// the task. It reports a lost race: look again.
func (p *pipeline) claim(it *item, box *mailbox, v verdict) (again bool) {
	// The span covers the claim's write (its S3 call is a child): the
	// reads before it are looks, many per claim, and not worth a span.
	ctx, span := p.startSpan(p.ctx, v.t, spanClaim)
	etag, err := p.h.tasks.Write(ctx, v.t, v.etag)
	if errors.Is(err, storage.ErrPrecondition) {
		span.AddEvent("claim lost a race: looking again")
		span.End()
		p.h.metrics.claimRaces.Inc()
		return true // someone changed it (a cancel, a replay): look again
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		p.retryLater(it, err)
		return false
	}
	span.End()
	p.h.metrics.claims.Inc()
	c := v.run
	c.t, c.etag = v.t, etag
	p.execute(it, box, c)
	return false
}

// look reads the task of pointer it and decides what to do with it. tries
// counts the looks before this one.
func (p *pipeline) look(it *item, tries int) verdict {
	if p.ctx.Err() != nil {
		// Not owned any more: the next owner lists the pointer.
		return verdict{do: actForget}
	}
	if tries == 5 {
		p.h.log.Warn("task keeps changing under its claim; retrying later", "task", it.ptr.Key)
		return waitUntil(p.soon(time.Second))
	}
	id := it.ptr.ID
	readAt := time.Now()
	now, err := p.h.tasks.Now(p.ctx)
	if err != nil {
		return retry(err)
	}
	if p.h.isActive(p.taskKey(id)) {
		// An earlier ownership's handler of this task ignores its
		// interruption and still runs here: never a second run.
		return waitUntil(now.Latest().Add(500 * time.Millisecond))
	}
	s := &seen{now: now, readAt: readAt}
	if v, ok := p.fromHint(it, s); ok {
		return v
	}
	t, etag, err := p.h.tasks.Load(p.ctx, p.own.Shard, id)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return p.orphan(it, now)
	case errors.Is(err, task.ErrCorrupt):
		return verdict{do: actFailCorrupt, t: t, etag: etag, err: err}
	case err != nil:
		return retry(err)
	}
	p.s.found(id)
	s.t, s.etag = t, etag
	return p.decideTask(it, s)
}

// fromHint decides on the pointer's task as its wake-up hint carries it
// (the version its submitter wrote, with its ETag), without reading it:
// no GET on the happy path. It reports false, leaving the
// decision to a read, when there is no hint or it does not decode to a
// pending task under this pointer. The hint is used once (kept only while
// the task is not due yet, see hintKeep): a lost claim race looks again by
// reading.
//
// Why this is safe: a pending task under its own pointer can only be
// claimed, waited for, forgotten (its type has no handler here) or failed
// for want of attempts, and the claim and the failure are writes
// conditional on the hint's ETag (If-Match), exactly as after a read. If
// the task changed since the hint was written (a cancel, a replay, a claim
// by a previous owner) its ETag changed and the write fails with 412,
// after which the worker reads the task and decides afresh. The decisions
// that would write without that condition (deleting or rewriting pointers
// of finished or moved tasks) are never taken on a hint. Waiting and
// forgetting only delay the task.
func (p *pipeline) fromHint(it *item, s *seen) (verdict, bool) {
	h := it.hint
	it.hint = nil
	if h == nil {
		return verdict{}, false
	}
	t, etag, err := p.h.tasks.FromHint(it.ptr, *h)
	if err != nil || t.Status != task.Pending || t.PointerKey() != it.ptr.Key {
		return verdict{}, false
	}
	p.s.found(it.ptr.ID)
	s.t, s.etag = t, etag
	v := p.decideTask(it, s)
	if v.do == actWait && v.at.Sub(s.now.Latest()) <= hintKeep {
		it.hint = h
	}
	return v, true
}

// decideTask decides on a task that was read, by its pointer and its status.
func (p *pipeline) decideTask(it *item, s *seen) verdict {
	if s.t.Status.IsTerminal() {
		return verdict{do: actDrop} // finished: its pointer is stale
	}
	if s.t.PointerKey() != it.ptr.Key {
		// The task moved on (retried under a new pointer, replayed):
		// this pointer is stale. Its current one is written again
		// before this one goes, so that a task is never left without
		// a pointer, whatever wrote it and however that writer failed
		// (a runner before this version wrote the task first).
		return verdict{do: actRestore, t: s.t}
	}
	// What this claim may promise: read now, bound to the attempt in
	// execute (see detachment.Enforcement).
	s.enf = p.enforcement()
	if s.enf.Hold {
		// Detached in enforce mode: nothing starts, so no claim is
		// written either. A claim made now could not be enforced (its
		// holder is detached), so a successor would wait for it to lapse
		// before taking the task over, for a handler that the start
		// check refuses anyway (withAttachmentCheck). The shard's
		// context ends once the manager has handled the detachment;
		// until then, or until the runner attaches again, look later.
		return waitUntil(s.now.Latest().Add(time.Second))
	}
	s.ci = task.ClaimInfo{RunnerID: p.h.runnerID, Epoch: p.own.Epoch, LeaseID: p.own.LeaseID, Lease: p.h.cfg.TaskLease, Enforced: s.enf.Enforced}
	switch s.t.Status {
	case task.Running:
		return p.decideRunning(s)
	case task.Pending:
		return p.decidePending(s)
	}
	return verdict{do: actForget}
}

// decideRunning decides on a running task: one this runner claimed before,
// or one a previous owner left running, which is taken over at once only if
// its holder promised to stop in time (task.Claim.Enforced).
func (p *pipeline) decideRunning(s *seen) verdict {
	t, c, now := s.t, s.t.Claim, s.now
	if c != nil && c.Epoch > p.own.Epoch {
		// A newer owner has it: we are about to lose the shard.
		// The entity's later tasks wait with it.
		return waitUntil(now.Latest().Add(time.Second))
	}
	var terr error
	switch {
	case t.CancelRequested:
		// Its runner went before honouring the cancel: finish it.
		terr = t.FinishCancel(now.Now)
	case t.HeldBy(s.ci) && c.Enforced && s.enf.Ctx.Err() != nil:
		// Stopped here as its enforced claim promised, and the
		// detachment decision has not re-attached: a successor may
		// be taking it over. Look again later.
		return waitUntil(now.Latest().Add(time.Second))
	case t.HeldBy(s.ci):
		// Claimed by this runner and epoch before a detachment whose
		// handlers are gone: put it back and claim it afresh.
		terr = t.Requeue(now.Now, "orphaned by an earlier attachment of the same owner")
	case c != nil && !c.Enforced && now.Earliest().Before(c.LeaseExpiresAt):
		// Its holder did not promise to stop before its lease
		// expires (observe or off mode, or an older runner): it
		// may still run it, cut off from etcd but not from S3.
		// Wait out the claim in S3 time; the holder's renewals
		// push it further for as long as it runs.
		return waitUntil(c.LeaseExpiresAt.Add(now.Latest().Sub(now.Earliest())))
	default:
		terr = t.TakeOver(now.Earliest(), s.ci, p.takeoverReason(c))
		if terr == nil {
			p.h.metrics.takeovers.Inc()
		}
	}
	switch {
	case errors.Is(terr, task.ErrAttemptsExhausted):
		return s.failExhausted()
	case terr != nil:
		p.h.log.Warn("cannot take over task", "task", t.Ref(), "err", terr)
		return verdict{do: actForget}
	case t.Status != task.Running:
		// Cancelled or requeued: write that, then look again.
		return verdict{do: actWrite, t: t, etag: s.etag}
	}
	return s.claim()
}

// takeoverReason says, in the task's history, whose claim a takeover
// replaces (c, nil if none) and why it could.
func (p *pipeline) takeoverReason(c *task.Claim) string {
	if c == nil {
		return "left running by a previous owner"
	}
	reason := fmt.Sprintf("left running by %s at epoch %d (now %d)", c.RunnerID, c.Epoch, p.own.Epoch)
	if c.Enforced {
		return reason + ", which enforced detachment"
	}
	return reason + ", claim lapsed"
}

// decidePending decides on a pending task: claim it if this runner handles
// its type and it is due.
func (p *pipeline) decidePending(s *seen) verdict {
	t, now := s.t, s.now
	if _, ok := p.h.reg.lookup(t.Type); !ok {
		// Left pending for a runner that knows the type; looked at
		// again at the next reconciliation.
		p.h.metrics.unhandledType(t.Type)
		p.h.unhandled.Store(t.Type, time.Now())
		p.h.log.Warn("no handler for task type; leaving the task pending", "task", t.Ref(), "type", t.Type)
		return verdict{do: actForget}
	}
	if err := t.ClaimFor(now.Earliest(), s.ci); err != nil {
		var nd *task.NotDueError
		switch {
		case errors.As(err, &nd):
			// Dispatch compares the latest the S3 clock may read,
			// the claim the earliest: wait until the earliest
			// reaches the due time, not just the latest.
			return waitUntil(nd.Due.Add(now.Latest().Sub(now.Earliest())))
		case errors.Is(err, task.ErrAttemptsExhausted):
			return s.failExhausted()
		default:
			p.h.log.Warn("cannot claim task", "task", t.Ref(), "err", err)
			return verdict{do: actForget}
		}
	}
	return s.claim()
}

// lastModifiedGrain is the resolution of an object's LastModified: S3
// truncates it to the second.
const lastModifiedGrain = time.Second

// orphanAge is how long a pointer without its object has been seen so:
// for as long as this executor has seen it (seen), or, if longer, since
// the pointer was written by the S3 clock (written, from a listing; zero
// if unknown), less LastModified's resolution. The pointer's own age
// matters because an executor's memory starts with its ownership: a
// runner that detaches and re-attaches, or a shard that changes hands,
// more often than OrphanWait would otherwise wait out the same failed
// submission again at every ownership, and the entity's later tasks,
// queued behind it, would never run.
func orphanAge(seen time.Duration, written time.Time, now storage.ServerTime) time.Duration {
	if written.IsZero() {
		return seen
	}
	return max(seen, now.Earliest().Sub(written.Add(lastModifiedGrain)))
}

// orphan decides on a pointer whose task object does not exist. The
// submitter writes the pointer first and the object right after, so a young
// one is most likely a submission in progress: it is looked at again
// shortly, with backoff, keeping its place at the head of its entity's
// mailbox, for up to OrphanWait. Past that the submission is taken to have
// failed and the entity's later tasks go ahead; the pointer is deleted once
// it is OrphanPointerAge old. Its age counts from when the pointer was
// written, where a listing says so, not only from this ownership's first
// look (see orphanAge). orphan looks again at once if a wake-up for
// the pointer came while it was being looked at: a submitter wakes the
// owner only after writing the object, so the object exists now. A wake-up
// that comes while the pointer waits in the heap makes it due at once (see
// onWake).
func (p *pipeline) orphan(it *item, now storage.ServerTime) verdict {
	id := it.ptr.ID
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.s.rewoken[id] {
		delete(p.s.rewoken, id)
		return verdict{do: actLookAgain}
	}
	first, ok := p.s.orphans[id]
	if !ok {
		first = time.Now()
		p.s.orphans[id] = first
	}
	age := orphanAge(time.Since(first), it.ptr.Written, now)
	switch {
	case age < p.h.cfg.OrphanWait:
		return waitUntil(now.Latest().Add(min(max(age/2, 100*time.Millisecond), 2*time.Second)))
	case age < p.h.cfg.OrphanPointerAge:
		// Its wake-up, if the object still comes, or the next
		// reconciliation brings it back. Dropped from the known set
		// under the lock that checked rewoken, so that a wake-up from
		// now on queues it afresh (see onWake).
		delete(p.s.known, id)
		return verdict{do: actParked}
	}
	delete(p.s.orphans, id)
	return verdict{do: actDrop}
}
