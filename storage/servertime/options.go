package servertime

import "time"

// Defaults of an Estimator.
const (
	// DefaultResolution is the width of the window a Date header places the
	// server's clock in: HTTP dates are truncated to the second.
	DefaultResolution = time.Second
	// DefaultDrift is the assumed worst-case rate difference between the
	// local monotonic clock and the server's clock, as a fraction (200 ppm),
	// by which the kept interval widens as it ages.
	DefaultDrift = 200e-6
)

type options struct {
	resolution time.Duration
	drift      float64
	clock      func() time.Time
}

// Option configures an Estimator.
type Option func(*options)

// WithResolution sets how far behind the server's clock a Date header may
// read: the server's clock is taken to be in [Date, Date+d). The default is
// DefaultResolution. Servers that cache their Date header and refresh it
// periodically (fasthttp, and so VersityGW, refresh it once a second) need
// the refresh period added, or their samples will seem to contradict each
// other. Values ≤ 0 are ignored.
func WithResolution(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.resolution = d
		}
	}
}

// WithDrift sets the drift allowance as a fraction of elapsed local time
// (200e-6 is 200 ppm). The default is DefaultDrift. Negative values are
// ignored.
func WithDrift(rate float64) Option {
	return func(o *options) {
		if rate >= 0 {
			o.drift = rate
		}
	}
}

// WithClock sets the local clock Now and Age read (default time.Now). The
// sent and received instants passed to Observe must come from the same
// clock. Tests inject a fake one.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.clock = now
		}
	}
}
