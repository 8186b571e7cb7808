package detachment

import "time"

// Option configures New.
type Option func(*options)

type options struct {
	clock Clock
	lead  time.Duration
}

// WithClock makes the machine read time and schedule its timers on c instead
// of SystemClock. A nil c is ignored.
func WithClock(c Clock) Option {
	return func(o *options) {
		if c != nil {
			o.clock = c
		}
	}
}

// WithTimerLead moves the lease-deadline cutoff lead earlier than deadline -
// DetachMargin. Timers fire late by scheduling latency (milliseconds on a
// loaded machine); a lead larger than that latency makes "detach no later
// than deadline - DetachMargin" hold on a real clock, not just in the model.
// Default 0, for exact reasoning with a fake clock. Negative values are
// ignored.
func WithTimerLead(lead time.Duration) Option {
	return func(o *options) {
		if lead > 0 {
			o.lead = lead
		}
	}
}
