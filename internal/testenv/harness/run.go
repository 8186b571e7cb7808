package harness

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// ErrStopTimeout is returned by Run.Stop when the run did not return in
// time.
var ErrStopTimeout = errors.New("harness: run did not return")

// Run is a node's main function (a Manager's or a Runner's Run) running
// in a goroutine of its own until Stop.
type Run struct {
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // run's result, written before done closes
	stopped atomic.Bool
}

// Go starts run in a goroutine; Stop cancels its context.
func Go(run func(context.Context) error) *Run {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Run{cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = run(ctx)
		close(r.done)
	}()
	return r
}

// Running reports whether Stop has not been called: a run that returned
// on its own still counts as running, for a test to notice (see Exited).
func (r *Run) Running() bool { return !r.stopped.Load() }

// Exited reports whether the run has returned, and with what.
func (r *Run) Exited() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// Stop cancels the run's context and waits, at most within, for it to
// return. It returns the run's error, or ErrStopTimeout. A node stops
// once (by its test, or else at cleanup): later calls return nil at once.
func (r *Run) Stop(within time.Duration) error {
	if r.stopped.Swap(true) {
		return nil
	}
	r.cancel()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-r.done:
		return r.err
	case <-timer.C:
		return ErrStopTimeout
	}
}
