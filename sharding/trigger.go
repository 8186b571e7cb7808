package sharding

import (
	"sync"
	"time"
)

// trigger is a coalescing wake-up: any number of fires before the loop
// reads it count as one ("rebalance soon").
type trigger chan struct{}

func newTrigger() trigger { return make(trigger, 1) }

func (t trigger) fire() {
	select {
	case t <- struct{}{}:
	default:
	}
}

// debouncer fires t once, delay after the first call since the last firing,
// however many calls arrive in between: a burst of membership changes costs
// one rebalance, and none waits longer than delay.
type debouncer struct {
	mu      sync.Mutex
	delay   time.Duration
	t       trigger
	pending *time.Timer
}

func (d *debouncer) call() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending != nil {
		return
	}
	if d.delay == 0 {
		d.t.fire()
		return
	}
	d.pending = time.AfterFunc(d.delay, func() {
		d.mu.Lock()
		d.pending = nil
		d.mu.Unlock()
		d.t.fire()
	})
}

func (d *debouncer) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending != nil {
		d.pending.Stop()
		d.pending = nil
	}
}
