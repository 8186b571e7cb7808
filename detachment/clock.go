package detachment

import "time"

// Clock is the machine's source of time and timers. Injecting it keeps the
// machine deterministic under test; production uses SystemClock. The
// machine calls AfterFunc and Timer.Stop with its lock held, so neither may
// call back into the machine synchronously.
type Clock interface {
	// Now returns the current time. Times it returns should carry a
	// monotonic reading (as time.Now does), as should the sentAt times given
	// to KeepAliveOK, so that deadlines survive wall-clock jumps.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed, unless the
	// returned Timer is stopped first. A d ≤ 0 fires as soon as possible.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started yet and reports whether
	// it did. The machine never relies on the result: a call that slipped
	// through is recognised as stale and ignored.
	Stop() bool
}

// SystemClock returns the Clock backed by time.Now and time.AfterFunc. Inside
// a testing/synctest bubble both use the bubble's fake time, so tests can
// drive the machine with time.Sleep.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
