package detachment

import "time"

// LeaseIntervals are the intervals that follow a runner lease's TTL when
// they are not set. Every component that has one — the keep-alive loop,
// the detachment machine's margin, the lock refresh — takes it from
// DeriveFromLease, so that a configuration built by hand in an embedding
// service gets the same values as one loaded from a file, and the four
// can never disagree.
type LeaseIntervals struct {
	// KeepAliveInterval is TTL/3: three renewals per TTL, so that one lost
	// answer still leaves time for the next before the cutoff.
	KeepAliveInterval time.Duration
	// KeepAliveTimeout is TTL/6: a renewal gives up in half an interval.
	KeepAliveTimeout time.Duration
	// DetachMargin is TTL/3, one keep-alive period: the time left, before
	// the lease can expire, for entities to stop and for clock drift.
	DetachMargin time.Duration
	// LockRefreshInterval is TTL/3: owned locks are verified this often
	// while the membership stream is out of sync.
	LockRefreshInterval time.Duration
}

// DeriveFromLease returns the intervals that follow a lease of ttl.
func DeriveFromLease(ttl time.Duration) LeaseIntervals {
	return LeaseIntervals{
		KeepAliveInterval:   ttl / 3,
		KeepAliveTimeout:    ttl / 6,
		DetachMargin:        ttl / 3,
		LockRefreshInterval: ttl / 3,
	}
}

// WithLeaseDefaults returns c with a zero DetachMargin derived from
// leaseTTL (DeriveFromLease). Other zero fields stay zero: Validate says
// what they must be.
func (c Config) WithLeaseDefaults(leaseTTL time.Duration) Config {
	if c.DetachMargin == 0 {
		c.DetachMargin = DeriveFromLease(leaseTTL).DetachMargin
	}
	return c
}
