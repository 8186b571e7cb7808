package servertime

import (
	"sync"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Estimator estimates a server's clock from (send instant, receive instant,
// Date header) samples. It is safe for concurrent use.
type Estimator struct {
	opts options
	// base is the local instant offsets are measured from. Local instants
	// enter only as t.Sub(base), which uses the monotonic clock when both
	// carry a reading.
	base time.Time

	mu sync.Mutex
	// have reports that lo and hi hold an estimate.
	have bool
	// lo and hi bound the server's clock reading at the local instant base:
	// the server's clock at local instant t lies in
	// [lo + t.Sub(base), hi + t.Sub(base)], up to drift since at.
	lo, hi time.Time
	// at is the local elapsed time (since base) the interval is valid at;
	// it widens by the drift allowance with distance from it.
	at time.Duration
	// last is the local elapsed time of the latest sample's receipt.
	last    time.Duration
	samples uint64
	jumps   uint64
}

// Stats counts what an Estimator has seen.
type Stats struct {
	Samples uint64 // samples accepted by Observe
	// Jumps counts samples that contradicted the kept interval and restarted
	// the estimate: the server's clock was stepped, or its Date headers lag
	// by more than the configured resolution.
	Jumps uint64
}

// New returns an Estimator with no samples.
func New(opts ...Option) *Estimator {
	o := options{resolution: DefaultResolution, drift: DefaultDrift, clock: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	return &Estimator{opts: o, base: o.clock()}
}

// Observe records one response: the request was sent at local instant sent,
// its response received at local instant received, and the response's Date
// header read date. Samples with a zero date or received before sent are
// ignored. Samples may arrive out of order.
func (e *Estimator) Observe(sent, received, date time.Time) {
	if date.IsZero() || received.Before(sent) {
		return
	}
	s, r := sent.Sub(e.base), received.Sub(e.base)
	date = date.Round(0) // wall clock only; it is the server's reading
	// The server read date at some local instant u in [s, r], and its clock
	// then was in [date, date+resolution); so its clock at base was in
	// (date - r, date + resolution - s).
	sLo := date.Add(-r)
	sHi := date.Add(e.opts.resolution - s)

	e.mu.Lock()
	defer e.mu.Unlock()
	e.samples++
	e.last = max(e.last, r)
	if !e.have {
		e.lo, e.hi, e.at, e.have = sLo, sHi, r, true
		return
	}
	kLo, kHi := e.widened(r)
	lo, hi := later(kLo, sLo), earlier(kHi, sHi)
	if lo.After(hi) {
		// The sample cannot be reconciled with what we know: the server's
		// clock moved by more than drift allows. Trust the newest evidence.
		e.jumps++
		e.lo, e.hi, e.at = sLo, sHi, r
		return
	}
	e.lo, e.hi = lo, hi
	// A sample older than the interval still narrows it, but must not move
	// the reference instant back: the widening already done stays done.
	e.at = max(e.at, r)
}

// Now returns the estimated server time at the local clock's current instant:
// the midpoint of the interval the server's clock is known to be in, and half
// its width as the uncertainty. ok is false until the first sample.
func (e *Estimator) Now() (t storage.ServerTime, ok bool) {
	now := e.opts.clock()
	l := now.Sub(e.base)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.have {
		return storage.ServerTime{}, false
	}
	lo, hi := e.widened(l)
	width := hi.Sub(lo)
	// Round the half-width up so that Earliest and Latest never exclude an
	// end of the interval.
	half := (width + 1) / 2
	return storage.ServerTime{Now: lo.Add(width / 2).Add(l).UTC(), Uncertainty: half}, true
}

// Age returns how long ago, on the local clock, the latest sample was
// received. ok is false until the first sample.
func (e *Estimator) Age() (age time.Duration, ok bool) {
	l := e.opts.clock().Sub(e.base)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.samples == 0 {
		return 0, false
	}
	return max(l-e.last, 0), true
}

// Stats returns the sample and jump counts.
func (e *Estimator) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Samples: e.samples, Jumps: e.jumps}
}

// widened returns the kept interval widened by the drift allowance for the
// distance between l and the instant it was last narrowed at. e.mu is held.
func (e *Estimator) widened(l time.Duration) (lo, hi time.Time) {
	d := l - e.at
	if d < 0 {
		d = -d
	}
	w := time.Duration(float64(d) * e.opts.drift)
	return e.lo.Add(-w), e.hi.Add(w)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
