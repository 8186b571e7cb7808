package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// Delivering runs a message on the entity it addresses, on this runner:
// the gate and the turns are in turn.go, the handler call here.

// Message kinds and outcomes, the values of the kind and outcome labels of
// tenure_entity_messages_total.
const (
	kindCall = "call"
	kindSend = "send"

	msgOK        = "ok"
	msgError     = "error"
	msgPanic     = "panic"
	msgRefused   = "refused"
	msgCancelled = "cancelled"
	// msgApplication: the handler returned an *AppError.
	msgApplication = "application"
)

// ErrEmptyEntityID is returned for a message that names no entity id.
var ErrEmptyEntityID = errors.New("entity: message names no entity id")

// call is one admitted message. It is its handler's context: the caller's
// context (a send's own), cancelled by cancel, carrying the message
// (CallFrom) and the host's Caller (CallerFrom), in one allocation.
type call struct {
	context.Context
	cancel context.CancelCauseFunc
	msg    Message
	// parent is the caller's context (a send's own): when it has ended,
	// the caller's deadline or cancellation ended the message, else its
	// runner did (a detachment, a lost shard, a shutdown).
	parent context.Context
	caller Caller
	dec    context.Context // the detachment decision it was admitted under; nil: none
	box    *mailbox
	exec   *shardExec // the executor it was admitted to, for its entity's reminders
	// ro: a read-only operation of a defined type, which may share its
	// entity's turn with others (see turnReading); joined: it joined a
	// reading turn whose first reader activated the instance.
	ro, joined bool
	// ready is closed when a waiting message is handed the turn; granted
	// says so (under the executor's mu).
	ready      chan struct{}
	granted    bool
	started    time.Time // when it took the turn (set under the executor's mu)
	prev, next *call     // in the executor's calls, under its mu
}

type callKey struct{}

// Value answers CallFrom and CallerFrom without a context layer each.
func (c *call) Value(key any) any {
	switch key.(type) {
	case callKey:
		return &c.msg
	case callerKey:
		if c.caller != nil {
			return c.caller
		}
	case selfKey:
		if c.exec != nil {
			return c.exec.self(c.msg.Type, c.msg.ID, "")
		}
	}
	return c.Context.Value(key)
}

// ctxErr is the error of a message whose caller's context ended before
// it started.
func (c *call) ctxErr() error {
	return fmt.Errorf("entity: message to %s/%s: %w: %w", c.msg.Type, c.msg.ID, ErrNotStarted, context.Cause(c.parent))
}

// CallFrom returns the message a handler's context runs: a Handle called
// for a call or a send (through a task built from the message) finds it
// here, a Handle called for a task does not.
func CallFrom(ctx context.Context) (*Message, bool) {
	m, ok := ctx.Value(callKey{}).(*Message)
	return m, ok && m != nil
}

// Deliver runs the message d on its entity if this runner owns d.Shard
// under d.Epoch (any epoch when 0) and is attached, and returns the reply.
// A refusal is a *RefusedError: the handler did not run. A call runs on
// the caller's goroutine under ctx, cancelled also when the runner's
// detachment decision detaches or the shard is lost; in a planned release
// it finishes before the lock goes. A send (d.OneWay) returns once
// admitted: it runs later under its own context, bounded by
// Config.SendTimeout, and its outcome is logged and counted.
func (h *Host) Deliver(ctx context.Context, d Delivery) ([]byte, error) {
	kind := kindCall
	if d.OneWay {
		kind = kindSend
	}
	e := h.route(d.Shard)
	if e == nil {
		h.metrics.messages(kind, msgRefused).Inc()
		return nil, &RefusedError{Reason: RefusedNotOwner, Shard: d.Shard}
	}
	if d.Epoch != 0 && d.Epoch != e.own.Epoch {
		h.metrics.messages(kind, msgRefused).Inc()
		return nil, e.refusal(RefusedNotOwner)
	}
	if d.ID == "" {
		h.metrics.messages(kind, msgError).Inc()
		return nil, fmt.Errorf("%w (type %q)", ErrEmptyEntityID, d.Type)
	}
	rt, ok := h.reg.entry(d.Type)
	if !ok {
		h.metrics.messages(kind, msgError).Inc()
		return nil, fmt.Errorf("entity: message to %s/%s: %w: %q", d.Type, d.ID, ErrNoHandler, d.Type)
	}
	ro := rt.def != nil && rt.def.readOnlyOp(d.Op)
	if err := ctx.Err(); err != nil {
		h.metrics.messages(kind, msgCancelled).Inc()
		return nil, fmt.Errorf("entity: message to %s/%s: %w: %w", d.Type, d.ID, ErrNotStarted, context.Cause(ctx))
	}
	dctx := e.decision()
	key := task.EntityKey(d.Type, d.ID)
	if d.OneWay {
		return nil, e.admitSend(d.Message, dctx, key, ro)
	}
	c := &call{msg: d.Message, parent: ctx, caller: h.caller, dec: dctx, exec: e, ro: ro}
	c.Context, c.cancel = context.WithCancelCause(ctx)
	defer c.cancel(nil)
	e.mu.Lock()
	if err := e.gateLocked(dctx); err != nil {
		e.mu.Unlock()
		h.metrics.messages(kind, msgRefused).Inc()
		return nil, err
	}
	e.workers.Add(1)
	turn := e.takeTurnLocked(c, key)
	e.mu.Unlock()
	defer e.workers.Done()
	if !turn {
		if err := e.waitTurn(c); err != nil {
			h.metrics.messages(kind, outcomeOf(err)).Inc()
			return nil, err
		}
	}
	reply, err := e.runTurn(c, kind)
	return reply, err
}

// admitSend admits a send under the gate and runs it in the background.
// It takes its place in the mailbox before returning, so that one
// sender's sends (and its next call) run in the order sent.
func (e *shardExec) admitSend(m Message, dctx context.Context, key string, ro bool) error {
	c := &call{msg: m, caller: e.h.caller, dec: dctx, exec: e, ro: ro}
	// The send's context starts now, independent of the caller's, which
	// ends when Deliver returns.
	ctx, stop := context.WithTimeout(context.Background(), e.h.cfg.SendTimeout)
	c.parent = ctx
	c.Context, c.cancel = context.WithCancelCause(ctx)
	e.mu.Lock()
	if err := e.gateLocked(dctx); err != nil {
		e.mu.Unlock()
		c.cancel(nil)
		stop()
		e.h.metrics.messages(kindSend, msgRefused).Inc()
		return err
	}
	e.workers.Add(1)
	turn := e.takeTurnLocked(c, key)
	e.mu.Unlock()
	go func() {
		defer e.workers.Done()
		defer stop()
		defer c.cancel(nil)
		var err error
		if !turn {
			err = e.waitTurn(c)
		}
		if err == nil {
			_, err = e.runTurn(c, kindSend)
		} else {
			e.h.metrics.messages(kindSend, outcomeOf(err)).Inc()
		}
		if err != nil {
			e.h.log.Warn("send failed", "type", m.Type, "entity", m.ID, "shard", e.own.Shard.String(), "err", err)
		}
	}()
	return nil
}

// runTurn runs c, which holds its entity's turn, and hands the turn on.
func (e *shardExec) runTurn(c *call, kind string) (reply []byte, err error) {
	box := c.box
	if c.Err() != nil {
		err = e.notStarted(c) // ended while taking the turn
	} else if ent, ierr := e.turnEntity(c); ierr != nil {
		switch {
		case errors.Is(ierr, ErrStateFenced):
			// A newer ownership fenced the entity's state: the shard is
			// being lost, and the caller must route again.
			err = e.refusal(RefusedNotOwner)
		case e.ctx.Err() != nil:
			err = e.endedRefusal() // the activation ended with the shard
		case errors.Is(ierr, ErrNoHandler):
			err = ierr
		default:
			err = fmt.Errorf("entity: message to %s/%s: %w: activating the entity: %w", c.msg.Type, c.msg.ID, ErrNotStarted, ierr)
		}
	} else {
		reply, err = handleMessage(c, ent, e.own.Shard)
		var pe *PanicError
		var ae *AppError
		if err != nil && c.Err() != nil && !errors.As(err, &pe) && !errors.As(err, &ae) {
			err = interrupted(c, err)
		}
	}
	e.h.metrics.messageDuration(kind).Observe(time.Since(c.started).Seconds())
	var panicked bool
	if c.ro {
		panicked = e.endRead(c, err)
	} else {
		panicked = e.afterTurn(box, err)
		e.mu.Lock()
		e.leaveTurnLocked(c)
		e.mu.Unlock()
	}
	switch {
	case err == nil:
		e.h.metrics.messages(kind, msgOK).Inc()
	case panicked:
		e.h.metrics.messages(kind, msgPanic).Inc()
	default:
		e.h.metrics.messages(kind, outcomeOf(err)).Inc()
	}
	return reply, err
}

// turnEntity returns the entity c runs on, holding its turn: the
// mailbox's instance (activated now if need be); a reader that joined a
// reading turn shares the one its first reader activated, and a first
// reader that has it lets others join.
func (e *shardExec) turnEntity(c *call) (Entity, error) {
	box := c.box
	if c.joined {
		e.mu.Lock()
		in := box.inst
		e.mu.Unlock()
		if in == nil { // cannot happen: a reading turn keeps its instance
			return nil, errors.New("entity: a reader joined a turn without an instance")
		}
		e.h.resident.touch(in)
		return in.ent, nil
	}
	ent, _, err := e.instanceFor(box, c.msg.Type, c.msg.ID)
	if err == nil && c.ro {
		e.mu.Lock()
		e.sharedLocked(box)
		e.mu.Unlock()
	}
	return ent, err
}

// notStarted is the error of a message whose context ended after it was
// admitted and before its handler started. Its runner stopping it (a
// detachment, a lost shard) is a refusal, so that the caller routes it
// again; the caller's own deadline or cancellation is ErrNotStarted.
func (e *shardExec) notStarted(c *call) error {
	if c.parent.Err() != nil {
		return c.ctxErr()
	}
	if c.dec != nil && c.dec.Err() != nil {
		return e.refusal(RefusedNotAttached)
	}
	if e.ctx.Err() != nil {
		return e.endedRefusal()
	}
	return e.refusal(RefusedNotOwner)
}

// interrupted is the error of a handler that failed after its context
// ended: the interruption is what the caller must see, not the handler's
// own words for it. It matches ErrInterrupted, and the caller's context
// error when the caller's cancel or deadline ended it. A runner's
// interruption (a detachment, a lost shard, a shutdown) keeps only the
// text of its reason, which may wrap a context error of its own (a
// detachment's wraps the keep-alive's deadline): the caller's deadline did
// not pass, and nothing may read as if it had.
func interrupted(c *call, herr error) error {
	if c.parent.Err() != nil {
		return fmt.Errorf("entity: message to %s/%s: %w: %w (the handler returned: %v)", c.msg.Type, c.msg.ID, ErrInterrupted, context.Cause(c.parent), herr)
	}
	return &runnerStop{msg: c.msg, reason: context.Cause(c), herr: herr}
}

// runnerStop is the error of a handler its runner interrupted. It matches
// ErrInterrupted and its reason (e.g. a sharding.LostError), unless the
// reason matches a context error: then it keeps only the reason's text.
type runnerStop struct {
	msg    Message
	reason error
	herr   error
}

func (e *runnerStop) Error() string {
	return fmt.Sprintf("entity: message to %s/%s: %v by its runner: %v (the handler returned: %v)", e.msg.Type, e.msg.ID, ErrInterrupted, e.reason, e.herr)
}

func (e *runnerStop) Unwrap() []error {
	if e.reason == nil || errors.Is(e.reason, context.Canceled) || errors.Is(e.reason, context.DeadlineExceeded) {
		return []error{ErrInterrupted}
	}
	return []error{ErrInterrupted, e.reason}
}

// outcomeOf classifies a message's error for the outcome label.
func outcomeOf(err error) string {
	var ae *AppError
	switch {
	case errors.Is(err, ErrRefused):
		return msgRefused
	case errors.As(err, &ae):
		return msgApplication
	case errors.Is(err, ErrInterrupted), errors.Is(err, ErrNotStarted),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return msgCancelled
	}
	return msgError
}

// handleMessage runs the message on ent: Receive if it is a Receiver,
// otherwise Handle with a task built from the message.
func handleMessage(c *call, ent Entity, shard storage.ShardID) (reply []byte, err error) {
	if r, ok := ent.(Receiver); ok {
		defer func() {
			if v := recover(); v != nil {
				reply, err = nil, &PanicError{Value: v, Stack: string(debug.Stack())}
			}
		}()
		return r.Receive(c, &c.msg)
	}
	m := &c.msg
	if len(m.Body) > 0 && !json.Valid(m.Body) {
		return nil, fmt.Errorf("entity: message to %s/%s: %w: the body is not JSON and %s is not a Receiver",
			m.Type, m.ID, ErrBadInput, m.Type)
	}
	t := &task.Task{
		ID: "call-" + task.NewID(), Type: m.Type, Entity: m.ID, Shard: shard, Input: json.RawMessage(m.Body),
		Status: task.Running, Attempt: 1, MaxAttempts: 1, CreatedAt: time.Now(),
	}
	return safeHandle(c, ent, t)
}
