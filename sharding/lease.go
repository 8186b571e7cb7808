package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tenurehq/tenure/detachment"
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

// register opens a new session and starts its keep-alive loop, which feeds
// the machine (keepalive.go).
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
	go m.keepAlive(ss)
	return nil
}

// reregisterLoop replaces a lost lease with a new one, retrying with backoff
// until it succeeds or ctx ends. The old lease's locks died with it.
func (m *Manager) reregisterLoop(ctx context.Context) {
	m.mu.Lock()
	old := m.session
	m.session = nil
	clear(m.suspended)
	clear(m.pending)
	m.mu.Unlock()
	if old != nil {
		old.Orphan() // its keep-alive loop has already ended
	}
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		err := m.register(ctx)
		if err == nil {
			return
		}
		m.log.Warn("re-registration failed; retrying", "retry_in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, m.cfg.LeaseTTL/2)
	}
}

// storageResult feeds a runner-store call's outcome to the machine: a
// failure to reach the store starts (or continues) the storage-error grace,
// a success cancels it. Answers that prove the store reachable (not found,
// precondition, not owner) count as successes.
func (m *Manager) storageResult(op string, err error) {
	switch {
	case err == nil:
		m.machine.StorageOK()
	case errors.Is(err, context.Canceled):
	case errors.Is(err, storage.ErrUnavailable), errors.Is(err, storage.ErrAccessDenied):
		m.metrics.storageErrors.WithLabelValues(op).Inc()
		m.machine.StorageError(err)
	default:
		m.machine.StorageOK()
	}
}

// onTransition turns the machine's transitions into ownership changes,
// metrics and logs. It runs synchronously in the goroutine that caused the
// transition, after the attachment context was cancelled (for a detach).
func (m *Manager) onTransition(t detachment.Transition) {
	switch t.Kind {
	case detachment.Detached:
		m.metrics.detached.Set(1)
		m.metrics.detachments.WithLabelValues(string(t.Reason)).Inc()
		reason := LossDetached
		if t.Reason == detachment.ReasonStopped {
			reason = LossStopped
		}
		m.mu.Lock()
		m.attached = false
		n := len(m.owned)
		for s, o := range m.owned {
			m.suspended[s] = o.Epoch
			o.cancel(&LostError{Shard: s, Epoch: o.Epoch, Reason: reason, Err: t.Err})
			m.notify.push(notice{o: o.Ownership, lost: true, reason: reason})
		}
		clear(m.owned)
		m.metrics.owned.Set(0)
		m.mu.Unlock()
		m.notify.deliver()
		level := slog.LevelWarn
		if t.Reason == detachment.ReasonStopped {
			level = slog.LevelInfo
		}
		m.log.Log(context.Background(), level, "detached: shard entities stopped",
			"reason", t.Reason, "generation", t.Generation, "shards_interrupted", n,
			"deadline_lag", t.Deadline.Sub(t.At), "streak", t.Streak, "err", t.Err)
	case detachment.Attached:
		m.metrics.detached.Set(0)
		m.metrics.attachments.Inc()
		m.mu.Lock()
		m.attached, m.gen = true, t.Generation
		m.mu.Unlock()
		m.log.Info("attached", "after", t.Reason, "generation", t.Generation, "deadline_lag", t.Deadline.Sub(t.At))
		m.attachSoon.fire()
	case detachment.WouldDetach:
		m.metrics.wouldDetach.WithLabelValues(string(t.Reason)).Inc()
		m.log.Warn("would detach (observe mode: nothing interrupted)", "reason", t.Reason, "deadline_lag", t.Deadline.Sub(t.At), "err", t.Err)
	case detachment.WouldAttach:
		m.log.Info("would re-attach (observe mode)", "after", t.Reason)
	}
}
