package sharding

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// registerInitial registers the runner, waiting out a previous incarnation
// whose lease still holds the id (it expires within one TTL of its crash).
func (m *Manager) registerInitial(ctx context.Context) error {
	deadline := time.Now().Add(m.cfg.LeaseTTL + 2*time.Second)
	backoff := 100 * time.Millisecond
	for {
		err := m.register(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, storage.ErrRunnerExists) || time.Now().After(deadline) {
			return fmt.Errorf("sharding: register runner %s: %w", m.self.ID, err)
		}
		m.log.Info("runner id still registered by a previous lease; waiting for it to expire", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// register opens a new session and starts feeding its health to the
// machine.
func (m *Manager) register(ctx context.Context) error {
	m.mu.Lock()
	self := m.self
	if m.draining {
		self.Weight = 0
	}
	m.mu.Unlock()
	ss, err := m.store.Register(ctx, self, m.cfg.LeaseTTL)
	if err != nil {
		m.storageResult("register", err)
		return err
	}
	m.machine.StorageOK()
	m.mu.Lock()
	m.session = ss
	m.mu.Unlock()
	m.log.Info("registered", "lease", fmt.Sprintf("%x", ss.LeaseID()), "ttl", ss.TTL())
	go m.pumpHealth(ss)
	return nil
}

// pumpHealth feeds one session's keep-alive observations to the machine.
// Observations coalesce (only the latest is kept), so it reconstructs what
// it missed: a deadline that moved means a keep-alive succeeded, sent at
// deadline - TTL, and the streak says how many failed after it.
func (m *Manager) pumpHealth(ss storage.Session) {
	var lastDeadline time.Time
	lastStreak := 0
	var lastFailures uint64
	for h := range ss.Health(context.Background()) {
		if h.Deadline.After(lastDeadline) {
			m.machine.KeepAliveOK(h.LeaseID, h.Deadline.Add(-h.TTL), h.TTL)
			if lastStreak > 0 {
				m.log.Info("lease keep-alive recovered", "after_failures", lastStreak, "deadline_lag", time.Until(h.Deadline))
			}
			lastDeadline, lastStreak = h.Deadline, 0
		}
		for ; lastStreak < h.Streak; lastStreak++ {
			if h.LeaseLost && lastStreak == h.Streak-1 {
				break // the last failure is the loss itself
			}
			m.machine.KeepAliveFailed(h.LeaseID, h.Err)
			if lastStreak == 0 {
				m.log.Warn("lease keep-alive failing", "deadline_lag", time.Until(h.Deadline), "err", h.Err)
			}
		}
		if h.Failures > lastFailures {
			m.metrics.keepAliveFailures.Add(float64(h.Failures - lastFailures))
			lastFailures = h.Failures
		}
		m.metrics.keepAliveStreak.Set(float64(h.Streak))
		if h.LeaseLost {
			m.metrics.leaseLost.Inc()
			m.log.Warn("lease lost; detaching and registering again", "lease", fmt.Sprintf("%x", h.LeaseID), "err", h.Err)
			m.machine.LeaseLost(h.LeaseID)
			m.reregister.fire()
		}
	}
}
