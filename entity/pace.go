package entity

import (
	"math/rand/v2"
	"time"
)

// reconcilePace is when a shard lists its ready pointers next, when no
// wake-up asks for it. Wake-ups are how work normally arrives; the
// listing only finds what a lost wake-up did not announce. A busy shard
// lists every base interval, as the safety net always did, but an idle
// one backs off, doubling the wait after each listing that found nothing
// new, up to max: listing thousands of idle shards every minute was most
// of an idle cluster's S3 bill.
//
// Activity (a wake-up, the start of a task a listing did not queue, see
// item.listed; a listing's fresh find counts by itself) brings the wait
// back to base but does
// not push a listing already due sooner further away: a shard woken
// constantly still lists every base interval, so that a lost wake-up
// among many is found as soon as before.
//
// The loop goroutine alone uses it.
type reconcilePace struct {
	base, max time.Duration
	// interval is the current wait, before jitter.
	interval time.Duration
	// busy says there was activity since the last listing.
	busy bool
	// jitter returns a random duration in [0, d) for d > 0; rand.N
	// unless a test sets it.
	jitter func(d time.Duration) time.Duration
}

// newReconcilePace is the pace of a shard just acquired: an acquisition
// is activity, so the listing after the first one is base away.
func newReconcilePace(base, max time.Duration) *reconcilePace {
	return &reconcilePace{base: base, max: max, interval: base, busy: true, jitter: rand.N[time.Duration]}
}

// active notes activity on the shard: the wait falls back to base. The
// caller brings the next listing forward to wait() from now if it was
// further away.
func (p *reconcilePace) active() {
	p.busy = true
	p.interval = p.base
}

// listed notes a listing that found fresh pointers no wake-up had
// announced, and returns the wait until the next one: base after
// activity or a fresh find, otherwise twice the last wait, up to max.
func (p *reconcilePace) listed(fresh int) time.Duration {
	if fresh > 0 || p.busy {
		p.interval = p.base
	} else {
		p.interval = min(2*p.interval, p.max)
	}
	p.busy = false
	return p.wait()
}

// wait is the current interval plus up to a tenth of it, drawn afresh:
// never shorter than the interval, so that an idle shard lists at most
// once per max; and spread, so that the shards acquired together do not
// list together forever after.
func (p *reconcilePace) wait() time.Duration {
	if j := p.interval / 10; j > 0 {
		return p.interval + p.jitter(j)
	}
	return p.interval
}
