package sharding

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/storage"
)

// reregisterLoop replaces a lost lease with a new one, retrying with backoff
// until it succeeds or ctx ends. The old lease's locks died with it.
func (m *Manager) reregisterLoop(ctx context.Context) {
	m.mu.Lock()
	old := m.session
	m.session = nil
	m.forgetLocked()
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
		owned := m.shards.inState(shardOwned)
		n := len(owned)
		for _, s := range owned {
			o := m.shards.get(s).own
			m.moveLocked(s, suspendedAt(o.Epoch))
			o.cancel(&LostError{Shard: s, Epoch: o.Epoch, Reason: reason, Err: t.Err})
			m.notify.push(notice{o: o.Ownership, lost: true, reason: reason})
		}
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

// reattach re-verifies the locks kept through a detachment before any shard
// resumes: those still bound to our lease are owned again under the new
// attachment, the rest are forgotten.
func (m *Manager) reattach(ctx context.Context) {
	gen, ss, res, ok := m.verifyState(ctx, shardSuspended)
	if !ok {
		return // stay suspended; the next attach or rebalance tries again
	}
	m.mu.Lock()
	for _, r := range res {
		rec := m.shards.get(r.Shard)
		switch {
		case rec.state != shardSuspended:
		case r.Owned && r.Epoch == rec.epoch:
			m.own(gen, r.Shard, r.Epoch, ss.LeaseID())
		default:
			m.moveLocked(r.Shard, free())
		}
	}
	m.mu.Unlock()
	m.notify.deliver()
}

// probe makes a cheap read while detached, so a healthy store keeps sending
// healthy signals and the runner can re-attach. It leaves the view to the
// membership stream: a listing of every lock per probe would load etcd when
// it is least able to bear it.
func (m *Manager) probe(ctx context.Context) {
	if _, _, _, ok := m.attachedGen(); ok {
		return
	}
	_, _, err := m.store.Runners(ctx)
	m.storageResult("probe", err)
}
