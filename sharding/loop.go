package sharding

import (
	"context"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// loop is the only goroutine that makes lock calls. It acts on coalesced
// triggers and timers, and only while attached.
func (m *Manager) loop(ctx context.Context) {
	safety := time.NewTimer(m.cfg.RebalanceInterval)
	defer safety.Stop()
	refresh := time.NewTicker(m.cfg.LockRefreshInterval)
	defer refresh.Stop()
	probe := time.NewTicker(m.cfg.ProbeInterval)
	defer probe.Stop()
	retry := time.NewTicker(m.cfg.AcquireRetryInterval)
	defer retry.Stop()
	// settle wakes the loop when the start-up settle may end (settle.go);
	// it is not reset once settled.
	settle := time.NewTimer(m.settleLeft(time.Now()))
	defer settle.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case <-m.reregister:
			m.reregisterLoop(ctx)
		case <-m.attachSoon:
			m.reattach(ctx)
			m.rebalance(ctx, true)
		case <-m.rebalanceSoon:
			m.rebalance(ctx, false)
		case <-safety.C:
			// The fresh read verifies the owned locks as well: absorb
			// loses one that a newer listing lacks or shows under
			// another lease.
			safety.Reset(m.rebalance(ctx, true))
			m.reportStuck(time.Now())
		case <-settle.C:
			if left := m.settleLeft(time.Now()); left > 0 {
				settle.Reset(left)
			} else {
				// The first acquisition, from the settled view (a fresh
				// one unless the stream is in sync).
				m.rebalance(ctx, !m.streamInSync)
			}
		case b := <-m.membership:
			m.onMembership(ctx, b)
		case <-retry.C:
			m.retryStrays(ctx)
			if m.retryDue() {
				m.acquireWanted(ctx, true)
			} else if m.windowExhausted() {
				safety.Reset(min(m.cfg.RebalanceInterval, m.cfg.AcquireRetryWindow))
			}
		case <-refresh.C:
			m.refreshLocks(ctx)
		case <-probe.C:
			m.probe(ctx)
		case done := <-m.drainReq:
			done <- m.drain(ctx)
		}
	}
}

// attachedGen returns the live attachment generation and its context.
func (m *Manager) attachedGen() (context.Context, uint64, storage.Session, bool) {
	actx, gen, ok := m.machine.Attachment()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !ok || !m.attached || m.gen != gen || m.session == nil {
		return nil, 0, nil, false
	}
	return actx, gen, m.session, true
}

// rebalance recomputes the assignment (from a fresh read of the runners when
// fresh), releases the shards no longer ours, then acquires the ones that
// are. It returns when the next safety pass is due.
func (m *Manager) rebalance(ctx context.Context, fresh bool) time.Duration {
	next := m.cfg.RebalanceInterval
	if _, _, _, ok := m.attachedGen(); !ok {
		return next
	}
	start := time.Now()
	if fresh {
		if _, ok := m.readMembership(ctx); !ok {
			return next
		}
	}
	mine := m.assigned()
	m.mu.Lock()
	release := m.assignedElsewhereLocked(shardOwned, mine)
	strays := m.straysLocked(mine)
	m.mu.Unlock()
	// Detached or stopping, releaseAll stops: the rest waits for the
	// next pass.
	m.releaseAll(ctx, release)
	m.releaseStrays(ctx, strays)
	m.acquireWanted(ctx, false)
	m.metrics.rebalance.Observe(time.Since(start).Seconds())
	return next
}

// assigned returns the set of shards the latest assignment gives us.
func (m *Manager) assigned() map[storage.ShardID]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[storage.ShardID]bool{}
	for s, r := range m.assignment {
		if r == m.self.ID {
			out[s] = true
		}
	}
	return out
}
