package messaging

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type reqTestKey struct{}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestReqCtxLive: a live request context answers as a WithDeadline child
// of the stream's context: no error, its own deadline, the stream's
// values.
func TestReqCtxLive(t *testing.T) {
	parent := context.WithValue(context.Background(), reqTestKey{}, "v")
	c := newReqCtx(parent, time.Hour)
	if c.Err() != nil || context.Cause(c) != nil {
		t.Fatalf("live: Err %v, Cause %v", c.Err(), context.Cause(c))
	}
	if d, ok := c.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("Deadline %v %v, want an hour from now", d, ok)
	}
	if v := c.Value(reqTestKey{}); v != "v" {
		t.Fatalf("Value = %v, want the stream's", v)
	}
	if _, ok := newReqCtx(parent, 0).Deadline(); ok {
		t.Fatal("a request without a timeout has a deadline")
	}
	// The stream's deadline, when earlier, is the request's.
	early, cancel := context.WithTimeout(parent, time.Minute)
	defer cancel()
	pd, _ := early.Deadline()
	if d, _ := newReqCtx(early, time.Hour).Deadline(); !d.Equal(pd) {
		t.Fatalf("Deadline %v, want the stream's earlier %v", d, pd)
	}
}

// TestReqCtxDeadline: the deadline ends the request with
// DeadlineExceeded (Err and Cause), whether Done was asked for before it
// passed, after, or never; a cancel after it changes nothing.
func TestReqCtxDeadline(t *testing.T) {
	for _, when := range []string{"before", "after", "never"} {
		synctest.Test(t, func(t *testing.T) {
			c := newReqCtx(context.Background(), time.Second)
			var done <-chan struct{}
			if when == "before" {
				done = c.Done()
			}
			time.Sleep(time.Second) // synctest's clock: exactly the deadline
			synctest.Wait()
			if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
				t.Fatalf("%s: Err %v, Cause %v", when, c.Err(), context.Cause(c))
			}
			c.cancel()
			if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
				t.Fatalf("%s: after cancel: Err %v, Cause %v", when, c.Err(), context.Cause(c))
			}
			if when == "after" {
				done = c.Done()
			}
			if done != nil && !isClosed(done) {
				t.Fatalf("%s: Done not closed past the deadline", when)
			}
		})
	}
}

// TestReqCtxCancel: a cancel (the caller's, or the request's end) ends
// the request with Canceled; Done, contexts derived from it and
// AfterFuncs see it, whether made before or after; the deadline passing
// later changes nothing.
func TestReqCtxCancel(t *testing.T) {
	for _, doneFirst := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			c := newReqCtx(context.Background(), time.Second)
			var derived context.Context
			ran := make(chan struct{})
			hook := func() {
				var stop context.CancelFunc
				derived, stop = context.WithTimeout(c, time.Hour)
				t.Cleanup(stop)
				context.AfterFunc(c, func() { close(ran) })
			}
			if doneFirst {
				hook()
			}
			c.cancel()
			c.cancel()
			if !doneFirst {
				hook()
			}
			synctest.Wait()
			if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), context.Canceled) {
				t.Fatalf("doneFirst %v: Err %v, Cause %v", doneFirst, c.Err(), context.Cause(c))
			}
			if !isClosed(c.Done()) || !isClosed(derived.Done()) || !isClosed(ran) {
				t.Fatalf("doneFirst %v: Done, a derived context or an AfterFunc not ended by the cancel", doneFirst)
			}
			time.Sleep(2 * time.Second)
			if !errors.Is(c.Err(), context.Canceled) {
				t.Fatalf("doneFirst %v: the deadline replaced the cancel: %v", doneFirst, c.Err())
			}
		})
	}
}

// TestReqCtxStreamEnds: the stream's end ends the request with the
// stream's error and cause, before or after Done; a cancel afterwards
// keeps them.
func TestReqCtxStreamEnds(t *testing.T) {
	for _, doneFirst := range []bool{false, true} {
		parent, end := context.WithCancelCause(context.Background())
		c := newReqCtx(parent, time.Hour)
		var done <-chan struct{}
		if doneFirst {
			done = c.Done()
		}
		cause := errors.New("test: the stream broke")
		end(cause)
		if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), cause) {
			t.Fatalf("doneFirst %v: Err %v, Cause %v", doneFirst, c.Err(), context.Cause(c))
		}
		if done == nil {
			done = c.Done()
		}
		if !isClosed(done) {
			t.Fatalf("doneFirst %v: Done not closed after the stream's end", doneFirst)
		}
		c.cancel()
		if !errors.Is(context.Cause(c), cause) {
			t.Fatalf("doneFirst %v: cancel replaced the stream's cause: %v", doneFirst, context.Cause(c))
		}
	}
	// Cancelled first: the stream's later end does not replace it.
	parent, end := context.WithCancelCause(context.Background())
	c := newReqCtx(parent, 0)
	c.cancel()
	end(errors.New("test: the stream broke"))
	if !errors.Is(context.Cause(c), context.Canceled) || !isClosed(c.Done()) || !errors.Is(context.Cause(c), context.Canceled) {
		t.Fatalf("cancelled first: Cause %v", context.Cause(c))
	}
}

// TestReqCtxRace: Done, Err, Value and cancel from many goroutines at
// once (run under -race): one end, seen the same by all.
func TestReqCtxRace(t *testing.T) {
	for range 200 {
		c := newReqCtx(context.Background(), time.Hour)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				switch i % 4 {
				case 0:
					<-c.Done()
				case 1:
					c.cancel()
				case 2:
					_ = c.Err()
					_ = context.Cause(c)
				case 3:
					_ = c.Value(reqTestKey{})
				}
			})
		}
		wg.Wait()
		if !errors.Is(c.Err(), context.Canceled) || !isClosed(c.Done()) {
			t.Fatalf("Err %v after the race", c.Err())
		}
	}
}
