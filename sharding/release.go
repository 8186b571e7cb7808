package sharding

import (
	"context"
	"errors"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// release hands one shard over: interrupt, let the handler requeue its
// in-flight work while the lock is still held, then delete the lock. It
// reports false when it could not act (detached or stopping).
func (m *Manager) release(ctx context.Context, s storage.ShardID) bool {
	actx, _, ss, ok := m.attachedGen()
	if !ok {
		return false
	}
	start := time.Now()
	m.mu.Lock()
	r := m.shards.get(s)
	o := r.own
	own := r.state == shardOwned && m.moveLocked(s, releasingOf(o))
	if own {
		o.cancel(&LostError{Shard: s, Epoch: o.Epoch, Reason: LossReleased})
	}
	m.mu.Unlock()
	if !own {
		return true
	}
	// The handoff context ends with the attachment: a detached runner must
	// not write, not even to requeue.
	hctx, cancel := context.WithTimeout(actx, m.cfg.InterruptTimeout)
	m.notify.releasing(hctx, o.Ownership)
	cancel()
	err := ss.ReleaseShard(ctx, s)
	m.storageResult("release", err)
	if err != nil && !errors.Is(err, storage.ErrNotOwner) {
		m.log.Warn("releasing a shard lock failed; it stays held by our lease until the next pass", "shard", s.String(), "err", err)
		m.mu.Lock()
		m.moveLocked(s, suspendedAt(o.Epoch))
		m.mu.Unlock()
		return ctx.Err() == nil
	}
	m.mu.Lock()
	m.moveLocked(s, free())
	m.mu.Unlock()
	m.metrics.handoff.Observe(time.Since(start).Seconds())
	m.log.Debug("shard released", "shard", s.String(), "epoch", o.Epoch, "took", time.Since(start))
	return true
}

// drain drops our weight to 0 and releases every shard, one by one.
func (m *Manager) drain(ctx context.Context) error {
	m.mu.Lock()
	m.draining = true
	self := m.self
	self.Weight = 0
	ss := m.session
	m.mu.Unlock()
	if ss != nil {
		err := ss.UpdateRunner(ctx, self)
		m.storageResult("update runner", err)
		if err != nil {
			m.log.Warn("could not publish weight 0; releasing anyway", "err", err)
		}
	}
	m.recompute()
	for {
		m.mu.Lock()
		shards := m.shards.inState(shardOwned)
		m.mu.Unlock()
		if len(shards) == 0 {
			return nil
		}
		for _, s := range shards {
			if !m.release(ctx, s) {
				return errors.New("sharding: drain interrupted: runner detached or stopping")
			}
		}
	}
}
