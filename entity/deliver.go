package entity

// This file is past the ~500-line mark on purpose: it is the messenger,
// the one path of a call from Host.Deliver through the gate, the turn
// (read-only sharing included) and the handler to its outcome, read top
// to bottom; its concepts already have their own files (mailbox.go,
// turn.go, message.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// Delivering runs a message on the entity it addresses, on this runner:
// the gate and the handler call here (messenger), the turns in turn.go.
//
// Admission (gateLocked) follows the task gate: the executor's ownership
// under the caller's epoch, and the detachment decision attached. Messages
// have no S3 fence, so they stay bound to the decision they were admitted
// under in every mode: its end cancels them (decisionEnded). A lost shard
// cancels them too (ownershipEnded); a planned release lets the running
// ones finish (ShardReleasing waits for them while the lock is held) and
// refuses the waiting ones.

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
// context (a send's own), ended by its runner with interrupt (msgCtx),
// carrying the message (CallFrom) and the host's Caller (CallerFrom), in
// one allocation.
type call struct {
	msgCtx
	msg    Message
	caller Caller
	dec    context.Context // the detachment decision it was admitted under; nil: none
	box    *mailbox
	ref    *shardRef // the ownership it was admitted to, for its entity's reminders
	// ready is closed when a waiting message is handed the turn; granted
	// says so (under the scheduler's mu).
	ready   chan struct{}
	granted bool
	// ro: a read-only operation of a defined type, which may share its
	// entity's turn with others (see turnReading); joined: it joined a
	// reading turn whose first reader activated the instance. Beside
	// granted, so that the three share one word.
	ro, joined bool
	started    time.Time // when it took the turn (under the scheduler's mu once listed)
	prev, next *call     // in the scheduler's calls, under its mu
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
		if c.ref != nil {
			return c.ref.self(c.msg.Type, c.msg.ID, "")
		}
	}
	return c.msgCtx.value(key)
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
	dctx := e.msgs.decision()
	key := task.EntityKey(d.Type, d.ID)
	if d.OneWay {
		return nil, e.msgs.admitSend(d.Message, dctx, key, ro)
	}
	return e.msgs.call(ctx, d.Message, dctx, key, ro)
}

// call admits a call under the gate and runs it on the caller's
// goroutine, once it has its entity's turn.
func (m *messenger) call(ctx context.Context, msg Message, dctx context.Context, key string, ro bool) ([]byte, error) {
	c := &call{msgCtx: msgCtx{parent: ctx}, msg: msg, caller: m.h.caller, dec: dctx, ref: &m.shardRef, ro: ro}
	defer c.finish()
	// The clock is read before the lock, which every call of the shard
	// takes: a call granted its turn at once started now.
	c.started = time.Now()
	m.s.mu.Lock()
	if err := m.gateLocked(dctx); err != nil {
		m.s.mu.Unlock()
		m.h.metrics.messages(kindCall, msgRefused).Inc()
		return nil, err
	}
	m.s.workers.Add(1)
	turn := m.s.takeTurnLocked(c, key)
	if !turn {
		c.started = time.Time{} // set when it is granted the turn
	}
	m.s.mu.Unlock()
	defer m.s.workers.Done()
	if !turn {
		if err := m.waitTurn(c); err != nil {
			m.h.metrics.messages(kindCall, outcomeOf(err)).Inc()
			return nil, err
		}
	}
	return m.runTurn(c, kindCall)
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
	switch {
	case err == nil:
		return msgOK
	case errors.Is(err, ErrRefused):
		return msgRefused
	case isApp(err):
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
		ID: callTaskID(), Type: m.Type, Entity: m.ID, Shard: shard, Input: json.RawMessage(m.Body),
		Status: task.Running, Attempt: 1, MaxAttempts: 1, CreatedAt: c.started,
	}
	return safeHandle(c, ent, t)
}

// messenger runs the messages (calls and sends) addressed to a shard's
// entities: admission through the gate (the ownership under the caller's
// epoch, the detachment decision attached), a turn from the scheduler,
// the instance from residency, and the handler on the caller's goroutine
// (a call) or its own (a send).
type messenger struct {
	shardRef
	s   *scheduler
	res *residency
	// dec is the detachment decision context messages were last admitted
	// under (see decision).
	dec atomic.Pointer[decision]
}

// decision is a detachment decision context messages were admitted under.
type decision struct{ ctx context.Context }

// decision returns the runner's current detachment decision context, nil
// if the ownership has no machine (always attached). A decision context
// still live is the current one: the machine makes a new one only after
// the previous one has ended, so the last one seen is cached and the
// machine's lock taken only after a detach.
func (m *messenger) decision() context.Context {
	if m.own.Enforcement == nil {
		return nil
	}
	old := m.dec.Load()
	if old != nil && old.ctx.Err() == nil {
		return old.ctx
	}
	ctx := m.own.Enforcement().Ctx
	if ctx == nil {
		return nil
	}
	if (old == nil || old.ctx != ctx) && m.dec.CompareAndSwap(old, &decision{ctx: ctx}) {
		context.AfterFunc(ctx, func() { m.decisionEnded(ctx) })
	}
	return ctx
}

// decisionEnded cancels the running messages admitted under the decision
// context dctx, which has ended.
func (m *messenger) decisionEnded(dctx context.Context) {
	cause := context.Cause(dctx)
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	for c := m.s.calls.head; c != nil; c = c.next {
		if c.dec == dctx {
			c.interrupt(cause)
		}
	}
}

// ownershipEnded cancels the running messages when the shard is lost; in a
// planned release they finish, and ShardReleasing waits for them.
func (m *messenger) ownershipEnded() {
	cause := context.Cause(m.ctx)
	if releasing(cause) {
		return
	}
	m.cancelCalls(cause)
}

// cancelCalls cancels every running message with cause.
func (m *messenger) cancelCalls(cause error) {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	for c := m.s.calls.head; c != nil; c = c.next {
		c.interrupt(cause)
	}
}

// gateLocked refuses a message that may not start now: the ownership has
// ended (shard moving in a planned release, not owner otherwise), or the
// detachment decision dctx has ended. Under mu.
func (m *messenger) gateLocked(dctx context.Context) error {
	if dctx != nil && dctx.Err() != nil {
		return m.refusal(RefusedNotAttached)
	}
	if m.s.phase != phaseRunning || m.ctx.Err() != nil {
		return m.endedRefusal()
	}
	return nil
}

// waitTurn waits until c is handed its entity's turn. It fails, having
// left the queue (or handed on a turn it was just given), when c's context
// ends, the ownership ends or the decision c was admitted under ends.
func (m *messenger) waitTurn(c *call) error {
	var decDone <-chan struct{}
	if c.dec != nil {
		decDone = c.dec.Done()
	}
	select {
	case <-c.ready:
	case <-c.Done():
	case <-m.ctx.Done():
	case <-decDone:
	}
	m.s.mu.Lock()
	err := m.gateLocked(c.dec)
	if err == nil && c.Err() != nil {
		err = m.notStarted(c)
	}
	switch {
	case !c.granted:
		if err == nil { // cannot happen: woken only by a grant or an end
			err = errors.New("entity: message woken without its turn")
		}
		c.box.waiting = slices.DeleteFunc(c.box.waiting, func(w *call) bool { return w == c })
		m.s.dropIfIdleLocked(c.box)
	case err != nil && c.ro:
		// A reader leaves as readers do: the last one out may have an
		// instance to discard.
		m.s.mu.Unlock()
		m.endRead(c, nil)
		return err
	case err != nil:
		m.s.leaveTurnLocked(c)
	}
	m.s.mu.Unlock()
	return err
}

// endRead is the end of a read-only message's handler (err its error): a
// panic marks the instance for discarding, which the last reader out does
// before it hands the turn on, so that no reader's instance is stopped
// under it. It reports whether the handler panicked.
func (m *messenger) endRead(c *call, err error) (panicked bool) {
	panicked = isPanic(err)
	box := c.box
	m.s.mu.Lock()
	if panicked || errors.Is(err, ErrStateFenced) {
		box.discard = true
	}
	if box.readers > 1 {
		m.s.turnLocked(box, turnReading, box.readers-1)
		m.s.calls.remove(c)
		in := box.inst.Load()
		m.s.mu.Unlock()
		if in != nil && !panicked {
			m.h.resident.touch(in)
		}
		return panicked
	}
	// The last reader: nobody joins from now on.
	box.shared = false
	discard := box.discard
	box.discard = false
	m.s.mu.Unlock()
	if discard {
		m.res.discard(box)
	} else {
		m.res.afterTurn(box, nil)
	}
	m.s.mu.Lock()
	m.s.calls.remove(c)
	m.s.endTurnLocked(box)
	m.s.mu.Unlock()
	return panicked
}

// admitSend admits a send under the gate and runs it in the background.
// It takes its place in the mailbox before returning, so that one
// sender's sends (and its next call) run in the order sent.
func (m *messenger) admitSend(msg Message, dctx context.Context, key string, ro bool) error {
	c := &call{msg: msg, caller: m.h.caller, dec: dctx, ref: &m.shardRef, ro: ro}
	// The send's context starts now, independent of the caller's, which
	// ends when Deliver returns.
	ctx, stop := context.WithTimeout(context.Background(), m.h.cfg.SendTimeout)
	c.parent = ctx
	m.s.mu.Lock()
	if err := m.gateLocked(dctx); err != nil {
		m.s.mu.Unlock()
		c.finish()
		stop()
		m.h.metrics.messages(kindSend, msgRefused).Inc()
		return err
	}
	m.s.workers.Add(1)
	turn := m.s.takeTurnLocked(c, key)
	m.s.mu.Unlock()
	go func() {
		defer m.s.workers.Done()
		defer stop()
		defer c.finish()
		var err error
		if !turn {
			err = m.waitTurn(c)
		}
		if err == nil {
			_, err = m.runTurn(c, kindSend)
		} else {
			m.h.metrics.messages(kindSend, outcomeOf(err)).Inc()
		}
		if err != nil {
			m.h.log.Warn("send failed", "type", msg.Type, "entity", msg.ID, "shard", m.own.Shard.String(), "err", err)
		}
	}()
	return nil
}

// runTurn runs c, which holds its entity's turn, and hands the turn on.
func (m *messenger) runTurn(c *call, kind string) (reply []byte, err error) {
	box := c.box
	if c.Err() != nil {
		err = m.notStarted(c) // ended while taking the turn
	} else if ent, ierr := m.turnEntity(c); ierr != nil {
		switch {
		case errors.Is(ierr, ErrStateFenced):
			// A newer ownership fenced the entity's state: the shard is
			// being lost, and the caller must route again.
			err = m.refusal(RefusedNotOwner)
		case m.ctx.Err() != nil:
			err = m.endedRefusal() // the activation ended with the shard
		case errors.Is(ierr, ErrNoHandler):
			err = ierr
		default:
			err = fmt.Errorf("entity: message to %s/%s: %w: activating the entity: %w", c.msg.Type, c.msg.ID, ErrNotStarted, ierr)
		}
	} else {
		reply, err = handleMessage(c, ent, m.own.Shard)
		if err != nil && c.Err() != nil && !isPanic(err) && !isApp(err) {
			err = interrupted(c, err)
		}
	}
	m.h.metrics.messageDuration(kind).Observe(time.Since(c.started).Seconds())
	var panicked bool
	if c.ro {
		panicked = m.endRead(c, err)
	} else {
		panicked = m.res.afterTurn(box, err)
		m.s.mu.Lock()
		m.s.leaveTurnLocked(c)
		m.s.mu.Unlock()
	}
	m.h.metrics.served.Add(1)
	switch {
	case err == nil:
		m.h.metrics.messages(kind, msgOK).Inc()
	case panicked:
		m.h.metrics.messages(kind, msgPanic).Inc()
	default:
		m.h.metrics.messages(kind, outcomeOf(err)).Inc()
	}
	return reply, err
}

// turnEntity returns the entity c runs on, holding its turn: the
// mailbox's instance (activated now if need be); a reader that joined a
// reading turn shares the one its first reader activated, and a first
// reader that has it lets others join.
func (m *messenger) turnEntity(c *call) (Entity, error) {
	box := c.box
	if c.joined {
		in := box.inst.Load()
		if in == nil { // cannot happen: a reading turn keeps its instance
			return nil, errors.New("entity: a reader joined a turn without an instance")
		}
		return in.ent, nil // touched when its turn ends (endRead)
	}
	ent, _, err := m.res.instanceFor(box, c.msg.Type, c.msg.ID)
	if err == nil && c.ro {
		m.s.mu.Lock()
		m.s.sharedLocked(box)
		m.s.mu.Unlock()
	}
	return ent, err
}

// notStarted is the error of a message whose context ended after it was
// admitted and before its handler started. Its runner stopping it (a
// detachment, a lost shard) is a refusal, so that the caller routes it
// again; the caller's own deadline or cancellation is ErrNotStarted.
func (m *messenger) notStarted(c *call) error {
	if c.parent.Err() != nil {
		return c.ctxErr()
	}
	if c.dec != nil && c.dec.Err() != nil {
		return m.refusal(RefusedNotAttached)
	}
	if m.ctx.Err() != nil {
		return m.endedRefusal()
	}
	return m.refusal(RefusedNotOwner)
}
