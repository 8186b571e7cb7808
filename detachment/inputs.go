package detachment

import (
	"errors"
	"fmt"
	"time"
)

// errLeaseReplaced is the cause when a keep-alive confirms another lease
// while attached: the old lease, on which the shard locks ride, is no longer
// tracked, so nothing vouches for it any more.
var errLeaseReplaced = errors.New("detachment: keep-alive confirmed a new lease; the previous one is no longer tracked")

// KeepAliveOK reports a confirmed keep-alive of leaseID, sent at sentAt (the
// time the request left, read before sending), for which etcd granted ttl.
//
// The lease deadline becomes max(deadline, sentAt+ttl): the send time, not
// the receive time, since etcd may have granted the TTL as early as the
// request left. This is the only place the deadline is derived: callers pass
// each result as the session reported it (storage.KeepAliveResult's SentAt
// and TTL; the registration's grant is the first), in order.
//
// A sentAt in the future counts as now. A confirmation whose
// sentAt+ttl-DetachMargin has already passed arrived too late to vouch for
// anything: it resets the failure streak but neither moves the deadline nor
// counts as a healthy signal. A new lease id (re-registration) replaces the
// deadline instead, and retires the previous lease (detaching with
// ReasonLeaseLost if attached). A ttl ≤ 0 is how etcd reports a lease that
// no longer exists: it is handled as LeaseLost(leaseID). Results for a
// retired (lost or replaced) lease are ignored.
func (m *Machine) KeepAliveOK(leaseID int64, sentAt time.Time, ttl time.Duration) {
	m.input(func(now time.Time) {
		if ttl <= 0 {
			m.leaseLost(now, leaseID, fmt.Errorf("detachment: keep-alive of lease %d granted ttl %s: lease gone", leaseID, ttl))
			return
		}
		if m.retired.has(leaseID) {
			return
		}
		if sentAt.After(now) {
			sentAt = now
		}
		cand := sentAt.Add(ttl)
		if !m.hasLease || leaseID != m.leaseID {
			if m.hasLease {
				m.retired.add(m.leaseID)
				m.decideDetach(now, ReasonLeaseLost, errLeaseReplaced)
			}
			m.hasLease, m.leaseID, m.leaseGone = true, leaseID, false
			m.deadline = cand
		}
		m.streak, m.kaErr = 0, nil
		if !now.Before(cand.Add(-m.cfg.DetachMargin - m.lead)) {
			return // too late to vouch for anything
		}
		if cand.After(m.deadline) {
			m.deadline = cand
			m.scheduleDeadline(now)
		}
		m.healthy(now)
	})
}

// KeepAliveFailed reports a keep-alive of leaseID that failed (timeout, no
// leader, connection error). It adds to the failure streak and interrupts
// any recovery window; at KeepAliveFailureThreshold consecutive failures the
// runner detaches (ReasonKeepAliveFailures). Failures of a retired lease are
// ignored.
func (m *Machine) KeepAliveFailed(leaseID int64, err error) {
	m.input(func(now time.Time) {
		if m.retired.has(leaseID) {
			return
		}
		m.streak++
		m.kaErr = err
		m.closeWindow()
		if m.streak >= m.cfg.KeepAliveFailureThreshold {
			m.decideDetach(now, ReasonKeepAliveFailures, err)
		}
	})
}

// LeaseLost reports that leaseID no longer exists (expired, revoked, not
// found). The runner detaches at once (ReasonLeaseLost) and the lease is
// retired: only a keep-alive of another lease can start the recovery. A
// report for a lease the machine has never seen also detaches, since the
// machine cannot tell it is harmless; a repeated report is ignored.
func (m *Machine) LeaseLost(leaseID int64) {
	m.input(func(now time.Time) {
		m.leaseLost(now, leaseID, fmt.Errorf("detachment: lease %d lost", leaseID))
	})
}

func (m *Machine) leaseLost(now time.Time, leaseID int64, err error) {
	if m.retired.has(leaseID) {
		return
	}
	m.retired.add(leaseID)
	if m.hasLease && leaseID == m.leaseID {
		m.leaseGone = true
		if m.deadline.After(now) {
			m.deadline = now // the lease's life ended now, whatever was hoped
		}
	}
	m.decideDetach(now, ReasonLeaseLost, err)
}

// StorageError reports a failed storage call (get runners, acquire,
// refresh). It interrupts any recovery window and starts the
// StorageErrorGrace timer unless one is running; if no StorageOK cancels it
// in time the runner detaches (ReasonStorageError).
func (m *Machine) StorageError(err error) {
	m.input(func(now time.Time) {
		m.closeWindow()
		if m.gracePending {
			return
		}
		m.gracePending, m.graceStart, m.graceErr = true, now, err
		m.arm(&m.graceT, m.cfg.StorageErrorGrace, m.graceExpired)
	})
}

// StorageOK reports a successful storage call. It cancels a pending
// storage-error grace timer and is a healthy signal: after a detachment it
// opens the recovery window.
func (m *Machine) StorageOK() {
	m.input(func(now time.Time) {
		if m.gracePending {
			m.gracePending, m.graceErr = false, nil
			m.disarm(&m.graceT)
		}
		m.healthy(now)
	})
}

// Detach detaches the runner now, in every mode, for reason (ReasonExplicit
// if empty). It returns only once the attachment context is cancelled and
// every transition produced so far, by any goroutine, has been delivered to
// the subscribers. The runner re-attaches through the usual recovery window,
// except after Detach(ReasonStopped), which is final and stops the timers.
// Subscribers must not call it.
func (m *Machine) Detach(reason Reason) {
	if reason == "" {
		reason = ReasonExplicit
	}
	m.mu.Lock()
	if !m.stopped {
		now := m.clock.Now()
		m.checkDeadline(now)
		m.forced, m.forcedReason = true, reason
		if reason == ReasonStopped {
			m.stop()
		}
		m.decideDetach(now, reason, nil)
		m.reconcile(now)
		if m.stopped {
			m.reason = ReasonStopped
		}
	}
	b := m.takeBatch()
	upTo := m.issued // every batch produced so far, ours included
	m.mu.Unlock()
	m.deliver(b)
	m.waitDelivered(upTo)
}

// Close is Detach(ReasonStopped): the attachment context is cancelled,
// subscribers are told, every timer is stopped and all later inputs are
// ignored. It may be called more than once.
func (m *Machine) Close() { m.Detach(ReasonStopped) }

// stop makes the machine final: no timer stays armed, no input acts.
func (m *Machine) stop() {
	m.stopped = true
	m.disarm(&m.deadlineT)
	m.disarm(&m.windowT)
	m.disarm(&m.graceT)
	m.windowOpen, m.gracePending = false, false
}

// SetConfig changes the configuration at run time. An invalid cfg is
// rejected whole, with the same errors as Validate. Effects are immediate:
// a new DetachMargin re-schedules (or triggers) the deadline cutoff, a lower
// threshold detaches if the streak already reaches it, new RecoverWindow and
// StorageErrorGrace durations apply to the window and grace already running.
// Mode switches: to observe or off while detached by a decision (not by an
// explicit Detach), the runner re-attaches at once with a new generation; to
// enforce while the decision is detached, it detaches at once with the
// decision's reason. Subscribers must not call it.
func (m *Machine) SetConfig(cfg Config) error {
	if err := cfg.Validate(m.leaseTTL); err != nil {
		return err
	}
	m.mu.Lock()
	old := m.cfg
	m.cfg = cfg
	if !m.stopped {
		m.applyConfig(m.clock.Now(), old)
	}
	b := m.takeBatch()
	m.mu.Unlock()
	m.deliver(b)
	return nil
}

// applyConfig makes the new m.cfg take effect on what old had started.
func (m *Machine) applyConfig(now time.Time, old Config) {
	cfg := m.cfg
	m.checkDeadline(now)
	if cfg.DetachMargin != old.DetachMargin {
		m.scheduleDeadline(now)
	}
	if m.dAttached && m.streak >= cfg.KeepAliveFailureThreshold {
		m.decideDetach(now, ReasonKeepAliveFailures, m.kaErr)
	}
	if m.gracePending && cfg.StorageErrorGrace != old.StorageErrorGrace {
		if left := m.graceStart.Add(cfg.StorageErrorGrace).Sub(now); left > 0 {
			m.arm(&m.graceT, left, m.graceExpired)
		} else {
			m.disarm(&m.graceT)
			m.graceExpired(now)
		}
	}
	if m.windowOpen && cfg.RecoverWindow != old.RecoverWindow {
		if left := m.windowStart.Add(cfg.RecoverWindow).Sub(now); left > 0 {
			m.arm(&m.windowT, left, m.tryAttach)
		} else {
			m.disarm(&m.windowT)
			m.tryAttach(now)
		}
	}
	m.reconcile(now) // the mode may have changed
}

// Check detaches at once if the lease deadline − margin has passed, before
// it returns: every context the decision and the attachment gave out is
// then cancelled (synchronously, with its children). The cutoff timer
// normally does this on time; Check is for the moment after a process was
// paused past its lease (SIGSTOP, a frozen VM, a stop-the-world pause),
// when every goroutine resumes at once and the timer's may run after the
// one about to start work. Work about to have an effect — a claim, a
// handler's start, a handler's external call — calls it first, so that it
// never acts on an attachment that has already ended by the clock. A mutex
// and a clock read; no I/O. The contexts end before Check returns; the
// subscribers hear of the detachment on a goroutine of their own, in
// order as always, so that a caller deep in some work (which a subscriber
// may wait for, as a planned handoff waits for its shard's workers) never
// runs them itself.
func (m *Machine) Check() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.checkDeadline(m.clock.Now())
	b := m.takeBatch()
	m.mu.Unlock()
	if len(b.trans) > 0 {
		go m.deliver(b)
	}
}

// input runs f under the lock with the current time, after the deadline
// check (so a late timer cannot let an input act on an expired lease), then
// delivers what it produced. Inputs after stop are ignored.
func (m *Machine) input(f func(now time.Time)) {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	now := m.clock.Now()
	m.checkDeadline(now)
	f(now)
	b := m.takeBatch()
	m.mu.Unlock()
	m.deliver(b)
}
