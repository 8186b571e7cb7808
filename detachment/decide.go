package detachment

import (
	"context"
	"time"
)

// The decision: what enforce mode does. Every function here runs with m.mu
// held; changes of the decision reconcile the attachment at once, so that a
// detach cancels the attachment context before the input (or timer) that
// caused it returns.

// decideAttach attaches the decision; tryAttach has checked the conditions.
func (m *Machine) decideAttach(now time.Time) {
	ended := m.dReason
	m.dAttached, m.dReason, m.dErr = true, "", nil
	m.dctx, m.dcancel = context.WithCancelCause(context.Background())
	m.everAttached = true
	m.forced = false // the decision recovered: an explicit Detach is over
	m.closeWindow()
	if !m.reconcile(now) && m.cfg.Mode == ModeObserve {
		m.emit(now, WouldAttach, ended, nil)
	}
	m.scheduleDeadline(now)
}

// decideDetach detaches the decision for reason. Any detach signal is also a
// failure, so it closes the recovery window even when already detached; the
// first reason of a detachment is kept.
func (m *Machine) decideDetach(now time.Time, reason Reason, err error) {
	m.closeWindow()
	if !m.dAttached {
		return
	}
	m.dAttached, m.dReason, m.dErr = false, reason, err
	// Before the attachment: work bound to the decision stops with it, in
	// every mode (see Enforcement).
	m.dcancel(&DetachedError{Reason: reason, Generation: m.generation, At: now, Err: err})
	m.disarm(&m.deadlineT)
	if !m.reconcile(now) && m.cfg.Mode == ModeObserve {
		m.emit(now, WouldDetach, reason, err)
	}
}

// healthy handles a healthy signal (keep-alive or storage success): while
// detached it opens the recovery window if closed, then tries to attach. No
// window opens while the lease is gone: recovery starts with the first
// keep-alive of a new lease.
func (m *Machine) healthy(now time.Time) {
	if !m.dAttached && !m.windowOpen && m.hasLease && !m.leaseGone {
		m.windowOpen, m.windowStart = true, now
		m.arm(&m.windowT, m.cfg.RecoverWindow, m.tryAttach)
	}
	m.tryAttach(now)
}

// tryAttach attaches the decision if every condition holds: a live lease
// whose deadline is more than DetachMargin away, no storage error waiting
// out its grace, a failure streak under the threshold and, after the first
// attach, a recovery window open for RecoverWindow. A condition that fails
// is re-checked at the next healthy signal (or the window's end).
func (m *Machine) tryAttach(now time.Time) {
	switch {
	case m.dAttached, m.stopped, !m.hasLease, m.leaseGone, m.gracePending:
		return
	case m.streak >= m.cfg.KeepAliveFailureThreshold:
		return
	case !now.Before(m.cutoff()):
		return
	case m.everAttached && (!m.windowOpen || now.Sub(m.windowStart) < m.cfg.RecoverWindow):
		return
	}
	m.decideAttach(now)
}

func (m *Machine) closeWindow() {
	m.windowOpen, m.windowStart = false, time.Time{}
	m.disarm(&m.windowT)
}

// checkDeadline is the definitive cutoff: attached at or past deadline -
// margin means detach, whatever else is going on. The timer is its main
// trigger; inputs call it too, so a late timer cannot let them act on an
// expired lease.
func (m *Machine) checkDeadline(now time.Time) {
	if m.dAttached && !now.Before(m.cutoff()) {
		var err error
		if m.streak > 0 {
			err = m.kaErr
		}
		m.decideDetach(now, ReasonLeaseDeadline, err)
	}
}

// scheduleDeadline (re)arms the cutoff timer for the current deadline and
// margin, or detaches now if the cutoff has passed.
func (m *Machine) scheduleDeadline(now time.Time) {
	m.disarm(&m.deadlineT)
	if !m.dAttached {
		return
	}
	left := m.cutoff().Sub(now)
	if left <= 0 {
		m.checkDeadline(now)
		return
	}
	m.arm(&m.deadlineT, left, m.scheduleDeadline)
}

// graceExpired: a storage error went unanswered for StorageErrorGrace.
func (m *Machine) graceExpired(now time.Time) {
	err := m.graceErr
	m.gracePending, m.graceErr = false, nil
	m.disarm(&m.graceT)
	m.decideDetach(now, ReasonStorageError, err)
}

// timerSlot is one of the machine's timers. seq identifies the arming: a
// callback that fires after its slot was disarmed or re-armed (Stop lost the
// race) finds another seq and does nothing.
type timerSlot struct {
	t   Timer
	seq uint64
}

// arm (re)starts the slot's timer: after d, fire runs with m.mu held. d must
// be > 0, so the Clock never has to call back synchronously.
func (m *Machine) arm(s *timerSlot, d time.Duration, fire func(now time.Time)) {
	m.disarm(s)
	m.timerSeq++
	seq := m.timerSeq
	s.seq = seq
	s.t = m.clock.AfterFunc(d, func() { m.onTimer(s, seq, fire) })
}

func (m *Machine) disarm(s *timerSlot) {
	if s.t != nil {
		s.t.Stop()
	}
	s.t, s.seq = nil, 0
}

func (m *Machine) onTimer(s *timerSlot, seq uint64, fire func(now time.Time)) {
	m.mu.Lock()
	if m.stopped || s.seq != seq {
		m.mu.Unlock()
		return
	}
	s.t, s.seq = nil, 0
	now := m.clock.Now()
	m.checkDeadline(now)
	fire(now)
	b := m.takeBatch()
	m.mu.Unlock()
	m.deliver(b)
}
