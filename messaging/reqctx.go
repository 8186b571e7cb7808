package messaging

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// reqCtx is the context a request read from a Stream runs under: the
// stream's context, bounded by the request's deadline and ended by the
// caller's cancellation or by the request's end (cancel), as a
// context.WithDeadline child of the stream's context would be.
//
// Why not that child: making one registers it with the stream's context
// (a map insert under that context's lock, shared by every request on the
// stream) and arms a runtime timer, and its end takes the lock and stops
// the timer again, for every request; most handlers never wait on Done,
// they return. So reqCtx answers Deadline, Err and Value from its own
// state and the stream's context, reading the clock where the deadline
// matters, and makes the real child (under its own lock) only when Done is
// first asked for — by the handler, by a context derived from it (whose
// registration asks), or by a message waiting for its entity's turn —
// after which the child answers everything. (entity's msgCtx does the
// same one layer up.)
//
// Its states: live → child (Done asked) → ended, or live → ended →
// child (Done asked after the end: made already ended, with the same
// error). The first end wins, as with any context: the stream's end, the
// deadline passing, or cancel.
type reqCtx struct {
	parent   context.Context // the stream's
	deadline time.Time       // zero: none of its own

	mu    sync.Mutex               // serialises making child with ending
	child atomic.Pointer[reqChild] // set once Done is asked for
	ended atomic.Pointer[reqEnd]   // set by cancel, when no child ended it
}

// reqChild is the real child context, once made.
type reqChild struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// reqEnd is how a reqCtx without a child ended: its error, and a context
// already ended with it whose Value answers context.Cause.
type reqEnd struct {
	err      error
	causeCtx context.Context
}

// The two ends a reqCtx can have of its own, made once.
var (
	reqCancelled = endedWith(context.Canceled)
	reqExpired   = endedWith(context.DeadlineExceeded)
)

func endedWith(err error) *reqEnd {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(err)
	return &reqEnd{err: err, causeCtx: ctx}
}

// newReqCtx returns a live reqCtx under parent, with a deadline timeout
// from now when timeout > 0.
func newReqCtx(parent context.Context, timeout time.Duration) *reqCtx {
	c := &reqCtx{parent: parent}
	if timeout > 0 {
		c.deadline = time.Now().Add(timeout)
	}
	return c
}

// Deadline is the earlier of its own and the stream's.
func (c *reqCtx) Deadline() (time.Time, bool) {
	pd, ok := c.parent.Deadline()
	switch {
	case c.deadline.IsZero():
		return pd, ok
	case ok && pd.Before(c.deadline):
		return pd, true
	}
	return c.deadline, true
}

// own is its own end, nil while it has none: cancelled, or past its
// deadline (the first of the two).
func (c *reqCtx) own() *reqEnd {
	if e := c.ended.Load(); e != nil {
		return e
	}
	if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
		return reqExpired
	}
	return nil
}

// Done makes the child (once) and returns its channel.
func (c *reqCtx) Done() <-chan struct{} {
	if ch := c.child.Load(); ch != nil {
		return ch.ctx.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.child.Load()
	if ch == nil {
		ch = &reqChild{}
		switch e := c.endFirst(); {
		case e != nil:
			// Ended first: the child must keep that end, whatever the
			// stream's context does since.
			var cancel context.CancelCauseFunc
			ch.ctx, cancel = context.WithCancelCause(context.WithoutCancel(c.parent))
			cancel(e.err)
			ch.cancel = func() {}
		case c.deadline.IsZero():
			ch.ctx, ch.cancel = context.WithCancel(c.parent)
		default:
			ch.ctx, ch.cancel = context.WithDeadline(c.parent, c.deadline)
		}
		c.child.Store(ch)
	}
	return ch.ctx.Done()
}

// endFirst is the end that came first when the stream's context may have
// ended too: the stream's own end is the child's then (nil here).
func (c *reqCtx) endFirst() *reqEnd {
	if c.parent.Err() != nil {
		if e := c.ended.Load(); e != nil {
			return e
		}
		return nil
	}
	return c.own()
}

// Err is the child's, else its own end's, else the stream's.
func (c *reqCtx) Err() error {
	if ch := c.child.Load(); ch != nil {
		return ch.ctx.Err()
	}
	if err := c.parent.Err(); err != nil {
		if e := c.ended.Load(); e != nil {
			return e.err
		}
		return err
	}
	if e := c.own(); e != nil {
		return e.err
	}
	return nil
}

// Value is the child's, else (once ended on its own) the ended context's
// for the key context.Cause looks for, else the stream's.
func (c *reqCtx) Value(key any) any {
	if ch := c.child.Load(); ch != nil {
		return ch.ctx.Value(key)
	}
	if c.parent.Err() == nil || c.ended.Load() != nil {
		if e := c.own(); e != nil {
			if v := e.causeCtx.Value(key); v != nil {
				return v
			}
		}
	}
	return c.parent.Value(key)
}

// cancel ends the request: the caller cancelled it, or it is over. A
// no-op once it has ended; the first end stays.
func (c *reqCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch := c.child.Load(); ch != nil {
		ch.cancel()
		return
	}
	if c.ended.Load() != nil || c.parent.Err() != nil {
		return
	}
	if c.own() != nil {
		c.ended.Store(reqExpired)
		return
	}
	c.ended.Store(reqCancelled)
}
