package storage

import (
	"context"
	"errors"
	"time"

	"github.com/tenurehq/tenure/detachment"
)

// KeepAliveResult is what one confirmation of a lease (a keep-alive, or the
// registration's grant) established, as raw facts. It carries no deadline:
// the detachment machine derives the lease deadline from SentAt and TTL, in
// one place.
type KeepAliveResult struct {
	// SentAt is when the request left, read before sending (it keeps the
	// monotonic clock reading): etcd may have granted TTL as early as this.
	SentAt time.Time
	// AnsweredAt is when the answer arrived; zero when none did.
	AnsweredAt time.Time
	// TTL is the TTL this answer granted; zero when there was no answer or
	// the lease was gone.
	TTL time.Duration
}

// DefaultKeepAliveRetryBackoff is the first delay before retrying a failed
// keep-alive: far below the interval, so that one lost answer does not use
// up the detach margin.
const DefaultKeepAliveRetryBackoff = 200 * time.Millisecond

// KeepAliveCadence is when KeepAliveLoop renews a lease.
type KeepAliveCadence struct {
	// Interval is the time from one send to the next after a success.
	Interval time.Duration
	// Timeout bounds one keep-alive call.
	Timeout time.Duration
	// RetryBackoff is the first delay before retrying a failed keep-alive;
	// it doubles on each further failure, up to Interval.
	RetryBackoff time.Duration
}

// DefaultKeepAliveCadence returns the cadence for a lease of ttl:
// detachment.DeriveFromLease's interval and timeout (the one rule for
// what follows the lease TTL, which a sharding.Manager's Config follows
// too), retries from DefaultKeepAliveRetryBackoff. It serves callers that
// hold a session without a sharding.Manager (tools, tests); a Manager's
// cadence is its Config's.
func DefaultKeepAliveCadence(ttl time.Duration) KeepAliveCadence {
	d := detachment.DeriveFromLease(ttl)
	return KeepAliveCadence{
		Interval:     d.KeepAliveInterval,
		Timeout:      d.KeepAliveTimeout,
		RetryBackoff: DefaultKeepAliveRetryBackoff,
	}
}

// orDefaults fills the zero fields of c from DefaultKeepAliveCadence(ttl).
func (c KeepAliveCadence) orDefaults(ttl time.Duration) KeepAliveCadence {
	d := DefaultKeepAliveCadence(ttl)
	if c.Interval <= 0 {
		c.Interval = d.Interval
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = d.RetryBackoff
	}
	return c
}

// KeepAliveLoop renews ss's lease on cadence c (zero fields take their
// defaults for ss's TTL) until ctx ends, ss ends, or a keep-alive finds the
// lease lost. The first keep-alive goes one interval after the
// registration's grant was sent. Every result is handed to report (which
// may be nil) on the calling goroutine, in order, before the next keep-alive
// is sent: nothing is coalesced or dropped, so report sees each failure and
// each success. A keep-alive that returns once the session or ctx has ended
// is not reported. Run it on a goroutine of its own.
func KeepAliveLoop(ctx context.Context, ss Session, c KeepAliveCadence, report func(KeepAliveResult, error)) {
	c = c.orDefaults(ss.TTL())
	backoff := c.RetryBackoff
	timer := time.NewTimer(time.Until(ss.Granted().SentAt.Add(c.Interval)))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ss.Done():
			return
		case <-timer.C:
		}
		cctx, cancel := context.WithTimeout(ctx, c.Timeout)
		res, err := ss.KeepAlive(cctx)
		cancel()
		if ctx.Err() != nil || errors.Is(err, ErrSessionClosed) {
			return
		}
		if report != nil {
			report(res, err)
		}
		var wait time.Duration
		switch {
		case err == nil:
			backoff = c.RetryBackoff
			wait = time.Until(res.SentAt.Add(c.Interval))
		case errors.Is(err, ErrLeaseLost):
			return
		default:
			wait = backoff
			backoff = min(2*backoff, c.Interval)
		}
		timer.Reset(max(wait, 0))
	}
}
