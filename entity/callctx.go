package entity

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// msgCtx is the context a message's handler runs under: the caller's
// context (a send's own), which the runner may also end (interrupt: a
// detachment, a lost shard, a shutdown), and which ends when the message
// is done (finish), as a context.WithCancelCause child of it would.
//
// Why not that child: making one registers it with the caller's context
// (its done channel made, a map of children allocated, both under the
// caller's context's lock) and unregistering it takes the lock again, on
// every call; on sixteen cores that was a fifth of a local call's time.
// Most handlers never ask for Done: they return. So msgCtx answers Err,
// Deadline and Value from the caller's context and its own state, and
// makes the real child (under its own lock) only when Done is first
// asked for — by the handler, by a context derived from it (whose
// registration asks), or by a message waiting for its turn — after
// which the child answers everything.
//
// Its states: live (neither ended nor a child) → child (Done asked) →
// ended, or live → ended → child (Done asked after the end: the child is
// made cancelled with the same cause). An ended msgCtx never lives again;
// the first end wins, as with any context.
type msgCtx struct {
	// parent is the caller's context (a send's own): when it has ended,
	// the caller's deadline or cancellation ended the message, else its
	// runner did (a detachment, a lost shard, a shutdown).
	parent context.Context

	mu    sync.Mutex                 // serialises making child with ending
	child atomic.Pointer[childCtx]   // set once Done is asked for
	ended atomic.Pointer[endedState] // set by the first interrupt or finish
}

// childCtx is the real child context, once made.
type childCtx struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// endedState is how a msgCtx without a child ended: cause, and a context
// already cancelled with it, whose Value answers context.Cause.
type endedState struct {
	cause    error
	causeCtx context.Context
}

// finished is the end of a message that returned: context.Canceled, as a
// WithCancelCause child's cancel(nil) leaves it.
var finished = func() *endedState {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(context.Canceled)
	return &endedState{cause: context.Canceled, causeCtx: ctx}
}()

// Deadline is the caller's.
func (c *msgCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done makes the child (once) and returns its channel.
func (c *msgCtx) Done() <-chan struct{} {
	if ch := c.child.Load(); ch != nil {
		return ch.ctx.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.child.Load()
	if ch == nil {
		var ctx context.Context
		var cancel context.CancelCauseFunc
		if e := c.ended.Load(); e != nil {
			// Ended first: the child must not take the caller's cause,
			// should the caller's context have ended since.
			ctx, cancel = context.WithCancelCause(context.WithoutCancel(c.parent))
			cancel(e.cause)
		} else {
			ctx, cancel = context.WithCancelCause(c.parent)
		}
		ch = &childCtx{ctx: ctx, cancel: cancel}
		c.child.Store(ch)
	}
	return ch.ctx.Done()
}

// Err is the child's, else context.Canceled once ended, else the caller's.
func (c *msgCtx) Err() error {
	if ch := c.child.Load(); ch != nil {
		return ch.ctx.Err()
	}
	if c.ended.Load() != nil {
		return context.Canceled
	}
	return c.parent.Err()
}

// value answers the keys the message's own layer does not: from the
// child, else from the cancelled context of the end (only the key
// context.Cause looks for finds anything there), else from the caller's.
func (c *msgCtx) value(key any) any {
	if ch := c.child.Load(); ch != nil {
		return ch.ctx.Value(key)
	}
	if e := c.ended.Load(); e != nil {
		if v := e.causeCtx.Value(key); v != nil {
			return v
		}
	}
	return c.parent.Value(key)
}

// interrupt ends the message with cause, its runner's reason; a no-op
// once it has ended.
func (c *msgCtx) interrupt(cause error) {
	c.end(func() *endedState {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return &endedState{cause: cause, causeCtx: ctx}
	})
}

// finish ends the message as it returns, and unregisters its child from
// the caller's context.
func (c *msgCtx) finish() {
	if c.child.Load() == nil && c.ended.Load() != nil {
		return
	}
	c.end(func() *endedState { return finished })
}

func (c *msgCtx) end(state func() *endedState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended.Load() != nil {
		if ch := c.child.Load(); ch != nil {
			ch.cancel(nil) // the first end's cause stays
		}
		return
	}
	e := state()
	c.ended.Store(e)
	if ch := c.child.Load(); ch != nil {
		ch.cancel(e.cause)
	}
}
