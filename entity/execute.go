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

// Executing runs a claimed task's handler (execute) under a context that
// ends with the shard's ownership, a cancel request, a lost claim, the
// task's timeout or, for an enforced claim, the detachment decision the
// claim was made under. Meanwhile renew keeps the claim alive, with a guard
// on the local clock for when renewals fail. The outcome goes to conclude
// (commit.go).

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

// attemptStage is where a claimed attempt is in the pipeline. It moves
// only forward, through pipeline.enter, which refuses any other move.
type attemptStage uint8

const (
	// stageClaimed: the claim is written; the instance is being activated.
	stageClaimed attemptStage = iota
	// stageRunning: the handler runs; renew keeps the claim alive.
	stageRunning
	// stageCommitting: the handler returned (or the activation failed):
	// conclude commits the outcome, puts the task back or leaves it.
	stageCommitting
	// stageDone: the worker is done with the attempt.
	stageDone

	numAttemptStages = iota
)

var attemptStageNames = [numAttemptStages]string{"claimed", "running", "committing", "done"}

func (s attemptStage) String() string {
	if int(s) < len(attemptStageNames) {
		return attemptStageNames[s]
	}
	return fmt.Sprintf("attemptStage(%d)", s)
}

// attemptTransitions are the moves of an attempt's stage, and why.
var attemptTransitions = []struct {
	from, to attemptStage
	why      string
}{
	{stageClaimed, stageRunning, "the instance is active: the handler starts"},
	{stageClaimed, stageCommitting, "the activation failed: the attempt fails"},
	{stageClaimed, stageDone, "the entity's state was fenced by a newer owner: the task is left to it"},
	{stageRunning, stageCommitting, "the handler returned"},
	{stageCommitting, stageDone, "the outcome is committed, put back or left to the next owner"},
}

var attemptMoveAllowed = func() (ok [numAttemptStages][numAttemptStages]bool) {
	for _, t := range attemptTransitions {
		ok[t.from][t.to] = true
	}
	return ok
}()

// errAttemptTransition is wrapped by every refused move of an attempt.
var errAttemptTransition = errors.New("entity: illegal attempt stage transition")

// move changes a's stage to to, refusing (changing nothing) a move that
// attemptTransitions does not list.
func (a *attempt) move(to attemptStage) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if int(to) >= numAttemptStages || !attemptMoveAllowed[a.stage][to] {
		return fmt.Errorf("%w: task %s: %s → %s", errAttemptTransition, a.t.Ref(), a.stage, to)
	}
	a.stage = to
	return nil
}

// attempt is one claimed task: its latest known object, for renewals and
// the commit, and its stage.
type attempt struct {
	mu    sync.Mutex
	stage attemptStage
	t     *task.Task
	etag  string
	// expires is when the claim's lease expires at the earliest, on the
	// local clock (see localExpiry).
	expires time.Time
	pokec   chan struct{}
	cancel  context.CancelCauseFunc
	started time.Time // when the handler was called
	// traced holds the attempt's execute span, for the log records of its
	// commit (see logContext); not for cancellation.
	traced context.Context
}

// logContext is the context to log about the attempt with, so that the
// records carry its trace and span ids.
func (a *attempt) logContext() context.Context {
	if a.traced == nil {
		return context.Background()
	}
	return a.traced
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

// claimed is what execute needs of a claim just written.
type claimed struct {
	t       *task.Task
	etag    string
	at      storage.ServerTime // the S3 time the claim was made at
	expires time.Time          // the claim's earliest local expiry
	enf     detachment.Enforcement
}

// localExpiry is when, on the local clock, a claim written with the S3 time
// now (read at local time readAt) for lease expires at the earliest: the S3
// clock may have been ahead of now.Earliest() by up to the estimate's width.
func localExpiry(readAt time.Time, now storage.ServerTime, lease time.Duration) time.Time {
	return readAt.Add(lease - now.Latest().Sub(now.Earliest()))
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

// Span names of an attempt: both children of the submit span whose context
// the task carries (task.Task.Trace), so a task's trace reads submit →
// claim → execute, attempt after attempt.
const (
	spanClaim   = "tenure.task.claim"
	spanExecute = "tenure.task.execute"
)

// startSpan starts a span of the task's attempt (spanClaim, spanExecute)
// as a child of the submit span whose context the task carries.
func (r *shardRef) startSpan(ctx context.Context, t *task.Task, name string) (context.Context, trace.Span) {
	if t.Trace != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": t.Trace})
	}
	kind := trace.SpanKindInternal
	if name == spanExecute {
		kind = trace.SpanKindConsumer // the submit span is its producer
	}
	return r.h.tracer.Start(ctx, name,
		trace.WithSpanKind(kind),
		trace.WithAttributes(
			attribute.String("tenure.task.id", t.ID),
			attribute.String("tenure.task.type", t.Type),
			attribute.String("tenure.task.entity", t.Entity),
			attribute.String("tenure.shard", t.Shard.String()),
			attribute.Int("tenure.task.attempt", t.Attempt),
			attribute.Int64("tenure.shard.epoch", r.own.Epoch),
		))
}

// execute runs a claimed task's handler and commits the outcome. An attempt
// whose claim promises enforcement is bound to the detachment decision that
// made the promise, so it stops before the lease can expire even if the
// runner leaves enforce mode meanwhile.
func (p *pipeline) execute(it *item, box *mailbox, c claimed) {
	t := c.t
	a := &attempt{t: t, etag: c.etag, expires: c.expires, pokec: make(chan struct{}, 1)}
	key := p.taskKey(t.ID)
	if !p.h.activate(key, a) {
		// Cannot happen while look checks first; never run twice.
		p.h.log.Error("task already running on this runner; leaving the claim to lapse", "task", t.Ref())
		p.s.forget(it.ptr.ID)
		return
	}
	defer p.h.deactivate(key, a)
	defer p.enter(a, stageDone)
	// The span covers the activation too: a failing OnStart fails the
	// attempt, and shows in its trace.
	sctx, span := p.startSpan(p.ctx, t, spanExecute)
	defer span.End()
	a.traced = sctx
	ent, sc, err := p.res.instanceFor(box, t.Type, t.Entity)
	if errors.Is(err, ErrStateFenced) {
		// A newer ownership fenced the entity's state: this shard is being
		// lost. Leave the task to the successor, as a lost shard does.
		span.AddEvent("abandoned: the entity's state was fenced by a newer owner")
		p.h.metrics.attempt(t.Type, outcomeAbandoned)
		p.s.requeue(it, p.soon(time.Second))
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		p.enter(a, stageCommitting) // the activation failed the attempt
		p.conclude(it, a, nil, err, nil)
		return
	}
	hctx, cancel := context.WithCancelCause(sctx)
	defer cancel(nil)
	a.cancel = cancel
	if p.h.caller != nil {
		hctx = ContextWithCaller(hctx, p.h.caller)
	}
	hctx = p.withSelf(hctx, t.Type, t.Entity, t.ID)
	var bound context.Context
	if t.Claim != nil && t.Claim.Enforced {
		bound = c.enf.Ctx
		stop := context.AfterFunc(c.enf.Ctx, func() { cancel(errEnforcedStop) })
		defer stop()
	}
	hctx = p.withAttachmentCheck(hctx, bound)
	if t.Timeout > 0 {
		var stop context.CancelFunc
		hctx, stop = context.WithTimeoutCause(hctx, time.Duration(t.Timeout), errTimeout)
		defer stop()
	}

	a.started = time.Now()
	p.enter(a, stageRunning)
	p.s.mu.Lock()
	p.s.inflight[t.ID] = a
	p.s.mu.Unlock()
	var renewing sync.WaitGroup
	renewing.Add(1)
	go func() {
		defer renewing.Done()
		p.renew(hctx, a)
	}()
	if !t.AvailableAt.After(t.CreatedAt) && t.Attempt == 1 {
		p.h.metrics.startLatency.Observe(c.at.Now.Sub(t.CreatedAt).Seconds())
	}
	view := t.Clone() // the handler's own copy: renewals change a.t
	var result json.RawMessage
	var herr error
	if Attached(hctx) != nil {
		// Interrupted between the claim and the start (Attached also
		// catches a runner whose lease ran out while the process was
		// paused during the claim, before its timer says so): do not
		// start. With hctx still live, it was the enforced claim's
		// decision that ended, whose AfterFunc has not run yet: stop as
		// it would have.
		if hctx.Err() == nil {
			cancel(errEnforcedStop)
		}
		herr = context.Cause(hctx)
	} else {
		result, herr = p.handleStateful(hctx, ent, sc, view)
	}
	p.h.metrics.attemptDuration(t.Type).Observe(time.Since(a.started).Seconds())
	cause := context.Cause(hctx)
	cancel(nil)
	renewing.Wait()
	p.s.mu.Lock()
	delete(p.s.inflight, t.ID)
	p.s.mu.Unlock()
	p.res.afterTurn(box, herr)
	if sc != nil && herr != nil {
		// Its memory may hold changes the failed handler made and that
		// were not written: the next turn reloads from S3.
		p.res.discard(box)
	}
	if herr != nil {
		span.RecordError(herr)
		span.SetStatus(codes.Error, herr.Error())
	}
	p.enter(a, stageCommitting)
	p.conclude(it, a, result, herr, cause)
}

// enter moves a to stage to; a refused move is a bug, logged.
func (p *pipeline) enter(a *attempt, to attemptStage) {
	if err := a.move(to); err != nil {
		p.h.log.Error("refused an attempt stage transition", "shard", p.own.Shard.String(), "err", err)
	}
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
func (p *pipeline) renew(hctx context.Context, a *attempt) {
	every := p.h.cfg.TaskLease / 3
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
		now, err := p.h.tasks.Now(hctx)
		if err == nil && !poked {
			renewed := t.Clone()
			if err = renewed.Renew(now.Earliest(), p.h.cfg.TaskLease); err == nil {
				var newEtag string
				if newEtag, err = p.h.tasks.Write(hctx, renewed, etag); err == nil {
					a.set(renewed, newEtag)
					exp := localExpiry(readAt, now, p.h.cfg.TaskLease)
					a.setExpiry(exp)
					guard.Reset(time.Until(exp.Add(-margin)))
					timer.Reset(next(every))
					continue
				}
			}
		}
		if poked || errors.Is(err, storage.ErrPrecondition) {
			fresh, fetag, lerr := p.h.tasks.Load(hctx, p.own.Shard, t.ID)
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
