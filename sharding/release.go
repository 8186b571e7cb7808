package sharding

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// releaseParallel bounds the planned releases in flight at once. A
// release is mostly waiting: for the Handler's ShardReleasing (one call
// at a time, as the Handler contract says) and for the store to delete
// the lock, a round trip each. One at a time, a drain of 410 shards took
// 5.4 s on two busy cores (4,096 shards over 10 runners); with the
// deletes overlapped it is bounded by the Handler's share. The bound keeps
// a drain of thousands of shards from sending thousands of deletes at
// once to the coordination store.
const releaseParallel = 16

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

// releaseAll hands shards over, up to releaseParallel at once (see
// release), and waits for every release it started. It reports false when
// a release could not act (detached or stopping): it then starts no
// more, and the rest waits for the next pass.
func (m *Manager) releaseAll(ctx context.Context, shards []storage.ShardID) bool {
	sem := make(chan struct{}, releaseParallel)
	var (
		wg      sync.WaitGroup
		stopped atomic.Bool
	)
	for _, s := range shards {
		sem <- struct{}{}
		if stopped.Load() {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer func() {
				<-sem
				wg.Done()
			}()
			if !m.release(ctx, s) {
				stopped.Store(true)
			}
		}()
	}
	wg.Wait()
	return !stopped.Load()
}

// drain drops our weight to 0 and releases every shard, up to
// releaseParallel at once.
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
		if !m.releaseAll(ctx, shards) {
			return errors.New("sharding: drain interrupted: runner detached or stopping")
		}
	}
}
