package entity

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type ctxTestKey struct{}

var errTestReason = errors.New("test: the runner detached")

// msgCall is a message whose context's caller is parent.
func msgCall(parent context.Context) *call { return &call{msgCtx: msgCtx{parent: parent}} }

// closed reports whether ch is closed, waiting at most a second for it.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(time.Second):
		return false
	}
}

// TestMsgCtxLive: a live message context answers from the caller's.
func TestMsgCtxLive(t *testing.T) {
	parent, cancel := context.WithTimeout(context.WithValue(context.Background(), ctxTestKey{}, "v"), time.Hour)
	defer cancel()
	c := msgCall(parent)
	if c.Err() != nil || context.Cause(c) != nil {
		t.Fatalf("live: Err %v, Cause %v", c.Err(), context.Cause(c))
	}
	pd, _ := parent.Deadline()
	if d, ok := c.Deadline(); !ok || !d.Equal(pd) {
		t.Fatalf("Deadline %v %v, want the caller's %v", d, ok, pd)
	}
	if v := c.Value(ctxTestKey{}); v != "v" {
		t.Fatalf("value = %v, want the caller's", v)
	}
}

// TestMsgCtxCallerEnds: the caller's deadline or cancellation ends the
// message, with the caller's error and cause, whether or not Done was
// asked for before.
func TestMsgCtxCallerEnds(t *testing.T) {
	for _, doneFirst := range []bool{false, true} {
		parent, cancel := context.WithCancelCause(context.Background())
		c := msgCall(parent)
		var done <-chan struct{}
		if doneFirst {
			done = c.Done()
		}
		cause := errors.New("test: the caller gave up")
		cancel(cause)
		if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), cause) {
			t.Fatalf("doneFirst %v: Err %v, Cause %v", doneFirst, c.Err(), context.Cause(c))
		}
		if done == nil {
			done = c.Done()
		}
		if !closed(done) {
			t.Fatalf("doneFirst %v: Done not closed after the caller's cancel", doneFirst)
		}
		c.finish()
		if !errors.Is(context.Cause(c), cause) {
			t.Fatalf("doneFirst %v: finish replaced the cause: %v", doneFirst, context.Cause(c))
		}
	}
	parent, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-parent.Done()
	c := msgCall(parent)
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
		t.Fatalf("deadline: Err %v, Cause %v", c.Err(), context.Cause(c))
	}
}

// TestMsgCtxInterrupt: the runner's interruption ends the message with its
// reason as the cause, before or after Done was asked for, and reaches
// what was derived from it; the first end wins.
func TestMsgCtxInterrupt(t *testing.T) {
	for _, doneFirst := range []bool{false, true} {
		parent, cancel := context.WithCancel(context.Background())
		c := msgCall(parent)
		var done <-chan struct{}
		var derived context.Context
		ran := make(chan struct{})
		if doneFirst {
			done = c.Done()
			var stop context.CancelFunc
			derived, stop = context.WithTimeout(c, time.Hour)
			defer stop()
			context.AfterFunc(c, func() { close(ran) })
		}
		c.interrupt(errTestReason)
		c.interrupt(errors.New("test: a second reason"))
		cancel() // the caller's end after the runner's changes nothing
		if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), errTestReason) {
			t.Fatalf("doneFirst %v: Err %v, Cause %v", doneFirst, c.Err(), context.Cause(c))
		}
		if done == nil {
			done = c.Done()
			var stop context.CancelFunc
			derived, stop = context.WithTimeout(c, time.Hour)
			defer stop()
			context.AfterFunc(c, func() { close(ran) })
		}
		if !closed(done) || !closed(derived.Done()) || !closed(ran) {
			t.Fatalf("doneFirst %v: Done, a derived context or an AfterFunc not ended by the interruption", doneFirst)
		}
		if !errors.Is(context.Cause(derived), errTestReason) {
			t.Fatalf("doneFirst %v: derived Cause %v", doneFirst, context.Cause(derived))
		}
	}
}

// TestMsgCtxFinish: a finished message's context is cancelled, as a
// WithCancelCause child's after cancel(nil), and a context derived from it
// before the end ends with it.
func TestMsgCtxFinish(t *testing.T) {
	c := msgCall(context.Background())
	derived, stop := context.WithCancel(c)
	defer stop()
	c.finish()
	if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), context.Canceled) {
		t.Fatalf("finished: Err %v, Cause %v", c.Err(), context.Cause(c))
	}
	if !closed(derived.Done()) || !closed(c.Done()) {
		t.Fatal("finish did not end the context or one derived from it")
	}
	c2 := msgCall(context.Background())
	c2.finish()
	if !closed(c2.Done()) {
		t.Fatal("Done asked after finish: not closed")
	}
}

// TestMsgCtxRace: interruption, Done, Err, derivation and finish at once.
func TestMsgCtxRace(t *testing.T) {
	for range 200 {
		parent, cancel := context.WithCancel(context.Background())
		c := msgCall(parent)
		var wg sync.WaitGroup
		wg.Go(func() { c.interrupt(errTestReason) })
		wg.Go(func() { <-c.Done() })
		wg.Go(func() {
			d, stop := context.WithCancel(c)
			<-d.Done()
			stop()
		})
		wg.Go(func() { _ = c.Err(); _ = context.Cause(c) })
		wg.Wait()
		c.finish()
		cancel()
		if !errors.Is(context.Cause(c), errTestReason) {
			t.Fatalf("Cause %v, want the interruption's", context.Cause(c))
		}
	}
}
