package entity

import (
	"context"
	"errors"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/sharding"
)

// Layout: a shardExec is one ownership of a shard, put together from
// parts that each own one concern and one state machine:
//
//   - scheduler (scheduler.go, turn.go, mailbox.go): admission of work,
//     the due heap, the per-entity FIFO mailboxes and their turns
//     (turnState), the shard's slots;
//   - pipeline (claim.go, execute.go, commit.go): one task's attempt,
//     claim → execute → renew → commit (attemptStage), which the
//     scheduler sees only as a taskRunner;
//   - residency (resident.go, statehost.go): the entities' instances, their
//     durable state, passivation;
//   - messenger (deliver.go): calls and sends on top of the turns, gated on
//     the ownership and the detachment decision;
//   - the lifecycle (stop.go): how the ownership ends (shardPhase, fate).
//
// Each part holds a shardRef, the ownership it works for.

// shardRef is what every part of a shard executor works for: the host,
// the ownership and its context.
type shardRef struct {
	h   *Host
	own sharding.Ownership
	ctx context.Context // own.Ctx: ends with the ownership
}

// shardExec executes one owned shard's tasks and messages for as long as
// the ownership lasts. Its loop goroutine (run) discovers ready pointers
// (from wake-ups, and listing on start and then at the pace of
// reconcilePace: every reconcile interval while busy, backing off to the
// maximum while idle) and has the scheduler start what is due; the parts
// do the rest.
type shardExec struct {
	shardRef
	sched scheduler
	res   residency
	pipe  pipeline
	msgs  messenger
	fate  fate
	// stopped is closed once everything the ownership started has
	// returned (phaseStopped): the loop, every worker (handler and
	// commit), the retention sweep and the entities' OnStop hooks.
	stopped chan struct{}
	// singletons are the supervisors of the singleton types this
	// ownership runs (set once at start, under sched.mu).
	singletons []*supervisor
}

// unit is what one worker runs: one entity-less task, or the head of a
// mailbox.
type unit struct {
	it  *item
	box *mailbox
}

// item is a known ready pointer.
type item struct {
	ptr task.Pointer
	// hint, from the wake-up that queued the pointer, is the task as its
	// submitter wrote it, for a claim without a read (see look). Only the
	// worker holding the item uses it, and drops it once used.
	hint *task.WakeHint
	// trail is the worker's that holds the item (set when it starts): the
	// commit of the task's final outcome leaves the pointer's deletion
	// there, for after the worker has given back its slot and its entity's
	// turn (see dropAfterTurn). It lives with the worker, not the item,
	// because an item put back in the heap goes on to another worker.
	trail *trailingDrop
	// listed: a listing queued the pointer, not a wake-up. Its start is
	// not activity for the reconcile pace (see reconcilePace): a fresh
	// find resets the pace by itself, and a pointer the shard leaves
	// alone on purpose (no handler here, its object missing), queued
	// again by every listing, must not keep an idle shard from backing
	// off.
	listed bool
}

// trailingDrop is a pointer deletion left for after a worker's turn.
type trailingDrop struct {
	ctx context.Context // the deletion's; nil: none left
}

func newShardExec(h *Host, o sharding.Ownership) *shardExec {
	ref := shardRef{h: h, own: o, ctx: o.Ctx}
	e := &shardExec{shardRef: ref, stopped: make(chan struct{}), fate: fate{decided: make(chan struct{}), wait: h.cfg.HookTimeout}}
	e.sched = scheduler{
		shardRef: ref,
		kickc:    make(chan struct{}, 1),
		known:    map[string]bool{},
		boxes:    map[string]*mailbox{},
		inflight: map[string]*attempt{},
		orphans:  map[string]time.Time{},
		rewoken:  map[string]bool{},
		tasks:    &e.pipe,
	}
	e.res = residency{shardRef: ref, s: &e.sched}
	e.pipe = pipeline{shardRef: ref, s: &e.sched, res: &e.res, fate: &e.fate}
	e.msgs = messenger{shardRef: ref, s: &e.sched, res: &e.res}
	// A lost shard (not a planned release) cancels the running messages.
	context.AfterFunc(o.Ctx, e.msgs.ownershipEnded)
	return e
}

// run is the shard's loop.
func (e *shardExec) run() {
	defer func() {
		_ = e.enter(phaseClosing) // admission refuses from now on
		e.sched.workers.Wait()
		_ = e.enter(phaseStopping)
		// In a planned release the hooks run under the handoff context,
		// while the lock is still held: the successor sees what they
		// wrote.
		reason, ctx := StopShardLost, context.Background()
		if hctx := e.fate.await(); hctx != nil {
			reason, ctx = StopShardReleased, hctx
		}
		e.res.stopAll(ctx, reason)
		_ = e.enter(phaseStopped)
	}()
	e.startSingletons()
	if e.h.cfg.TaskRetention > 0 {
		e.sched.workers.Add(1)
		go e.sweep()
	}
	wakes, werr := e.h.wakes.WatchWakes(e.ctx, e.own.Shard)
	if werr != nil && e.ctx.Err() == nil {
		e.h.log.Warn("watching wake-ups failed; relying on reconciliation until it works", "shard", e.own.Shard.String(), "err", werr)
	}
	pace := newReconcilePace(e.h.cfg.ReconcileInterval, e.h.cfg.ReconcileMaxInterval)
	reconcile := time.NewTimer(time.Hour)
	defer reconcile.Stop()
	var reconcileAt time.Time
	// list lists the shard's pointers and sets the next listing by the
	// pace: every listing, whatever asked for it, restarts the wait. While
	// the wake-up watch is down every wake-up is lost, and a listing that
	// failed did not look: the pace stays at the base interval.
	list := func() {
		fresh, ok := e.sched.reconcile()
		if wakes == nil || !ok {
			pace.active()
		}
		wait := pace.listed(fresh)
		reconcileAt = time.Now().Add(wait)
		reconcile.Reset(wait)
	}
	list()
	starts := e.sched.starts.Load()
	// active brings the next listing to at most the base interval away.
	active := func() {
		pace.active()
		if wait := pace.wait(); time.Now().Add(wait).Before(reconcileAt) {
			reconcileAt = time.Now().Add(wait)
			reconcile.Reset(wait)
		}
	}
	rewatch := time.NewTicker(5 * time.Second)
	defer rewatch.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		next := e.sched.dispatch()
		if n := e.sched.starts.Load(); n != starts {
			starts = n
			active()
		}
		due.Reset(next)
		select {
		case <-e.ctx.Done():
			return
		case ev, ok := <-wakes:
			if !ok {
				wakes = nil
				continue
			}
			e.h.metrics.wakeups.Inc()
			if ev.Resync {
				list()
				continue
			}
			active()
			e.sched.onWake(ev.Note)
		case <-rewatch.C:
			if wakes == nil && e.ctx.Err() == nil {
				if ch, err := e.h.wakes.WatchWakes(e.ctx, e.own.Shard); err == nil {
					wakes = ch
					list() // wake-ups may have been missed meanwhile
				}
			}
		case <-reconcile.C:
			list()
		case <-due.C:
		case <-e.sched.kickc:
		}
	}
}

// endedRefusal is the refusal of a message reaching an ended ownership.
func (r *shardRef) endedRefusal() error {
	cause := context.Cause(r.ctx)
	var lost *sharding.LostError
	switch {
	case releasing(cause):
		return r.refusal(RefusedShardMoving)
	case errors.As(cause, &lost) && lost.Reason == sharding.LossDetached:
		return r.refusal(RefusedNotAttached)
	}
	return &RefusedError{Reason: RefusedNotOwner, Shard: r.own.Shard}
}

func (r *shardRef) refusal(reason RefusalReason) error {
	return &RefusedError{Reason: reason, Shard: r.own.Shard, Epoch: r.own.Epoch}
}

// enforcement is what a claim made now may promise (see
// sharding.Ownership.Enforcement).
func (r *shardRef) enforcement() detachment.Enforcement {
	if r.own.Enforcement == nil {
		return detachment.Enforcement{Ctx: r.ctx}
	}
	return r.own.Enforcement()
}

// taskKey names a task across the runner's shards.
func (r *shardRef) taskKey(id string) string { return r.own.Shard.String() + "/" + id }

// soon returns d from now on the S3 clock the due heap runs on (the local
// clock when there is no estimate of it).
func (r *shardRef) soon(d time.Duration) time.Time {
	if now, err := r.h.tasks.Now(r.ctx); err == nil {
		return now.Latest().Add(d)
	}
	return time.Now().Add(d)
}
