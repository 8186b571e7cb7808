package tally

import "sync/atomic"

// Counter is a monotonically increasing count kept in stripes.
type Counter struct {
	stripes []counterStripe
}

type counterStripe struct {
	n atomic.Uint64
	_ [cacheLine - 8]byte
}

// NewCounter returns a counter at 0, not registered anywhere (see
// CounterVec for one Prometheus scrapes).
func NewCounter() *Counter { return &Counter{stripes: make([]counterStripe, stripeCount)} }

// Inc adds one.
func (c *Counter) Inc() { c.stripes[pick()].n.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) { c.stripes[pick()].n.Add(n) }

// Value returns the sum of every Add so far.
func (c *Counter) Value() uint64 {
	var v uint64
	for i := range c.stripes {
		v += c.stripes[i].n.Load()
	}
	return v
}
