package detachment

import "sync/atomic"

type subscriber struct {
	fn        func(Transition)
	cancelled atomic.Bool
}

// Subscribe registers fn to be told every transition that happens after
// Subscribe returns. It returns the function that unsubscribes.
//
// fn is called synchronously, exactly once per transition, in transition
// order across all subscribers and goroutines, on the goroutine whose input
// (or timer) caused the transition, without the machine's state lock held:
// it may call State, Attachment and Config. For a Detached transition the
// attachment context is already cancelled when fn runs. fn must not call the
// input methods (KeepAliveOK, …, Detach, SetConfig, Close) synchronously:
// delivery waits for earlier deliveries, so that would deadlock; hand the
// work to another goroutine instead. fn should be quick, as it holds up the
// input that caused the transition and every later delivery.
//
// After cancel returns, fn is not called for later transitions; a delivery
// already under way on another goroutine may still reach it once.
func (m *Machine) Subscribe(fn func(Transition)) (cancel func()) {
	if fn == nil {
		return func() {}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &subscriber{fn: fn}
	subs := make([]*subscriber, 0, len(m.subs)+1)
	m.subs = append(append(subs, m.subs...), s)
	return func() {
		s.cancelled.Store(true)
		m.mu.Lock()
		defer m.mu.Unlock()
		for i, x := range m.subs {
			if x == s {
				subs := make([]*subscriber, 0, len(m.subs)-1)
				m.subs = append(append(subs, m.subs[:i]...), m.subs[i+1:]...)
				return
			}
		}
	}
}

// batch is the transitions one locked section produced, with the
// subscribers registered at that time. Batches are numbered (ticket) in the
// order they were produced and delivered in that order.
type batch struct {
	ticket uint64
	trans  []Transition
	subs   []*subscriber
}

// takeBatch takes the pending transitions; m.mu must be held.
func (m *Machine) takeBatch() batch {
	if len(m.pending) == 0 {
		return batch{}
	}
	b := batch{ticket: m.issued, trans: m.pending, subs: m.subs}
	m.issued++
	m.pending = nil
	return b
}

// deliver waits for the batches before b, then calls the subscribers. It
// runs without m.mu, so subscribers may read the machine.
func (m *Machine) deliver(b batch) {
	if len(b.trans) == 0 {
		return
	}
	m.dmu.Lock()
	for m.delivered != b.ticket {
		m.dcond.Wait()
	}
	m.dmu.Unlock()
	// Even if a subscriber panics, later batches must not wait forever.
	defer func() {
		m.dmu.Lock()
		m.delivered++
		m.dcond.Broadcast()
		m.dmu.Unlock()
	}()
	for _, t := range b.trans {
		for _, s := range b.subs {
			if !s.cancelled.Load() {
				s.fn(t)
			}
		}
	}
}

// waitDelivered waits until the first n batches have been delivered.
func (m *Machine) waitDelivered(n uint64) {
	m.dmu.Lock()
	for m.delivered < n {
		m.dcond.Wait()
	}
	m.dmu.Unlock()
}
