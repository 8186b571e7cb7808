package sharding

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/storage"
)

// acquireWanted tries to acquire every assigned shard not owned yet (only
// the given ones when only is non-nil). With retry it tries only pending
// shards (held elsewhere) whose retry window is open, and counts the tries.
// A shard found held elsewhere opens a new retry window unless this is a
// retry.
func (m *Manager) acquireWanted(ctx context.Context, retry bool, only ...storage.ShardID) {
	_, gen, ss, ok := m.attachedGen()
	if !ok {
		return
	}
	mine := m.assigned()
	now := time.Now()
	m.mu.Lock()
	for _, s := range m.shards.inState(shardPending) { // shards no longer assigned stop being pending
		if !mine[s] {
			m.moveLocked(s, free())
		}
	}
	candidates := slices.Collect(maps.Keys(mine))
	if only != nil {
		candidates = only
	}
	var want []storage.ShardID
	for _, s := range candidates {
		r := m.shards.get(s)
		if r.state == shardOwned || !mine[s] {
			continue
		}
		if retry && (r.state != shardPending || now.Sub(r.retry.since) > m.cfg.AcquireRetryWindow) {
			continue
		}
		want = append(want, s)
	}
	m.mu.Unlock()
	if len(want) == 0 {
		return
	}
	slices.SortFunc(want, cmpShard)
	if retry {
		m.metrics.acquireRetries.Add(float64(len(want)))
	}
	res, err := ss.AcquireShards(ctx, want)
	if err != nil {
		m.storageResult("acquire", err)
		return
	}
	var storageErr error
	m.mu.Lock()
	for _, r := range res {
		switch r.Status {
		case storage.Acquired:
			m.own(gen, r.Shard, r.Epoch, ss.LeaseID())
		case storage.Held:
			// Held elsewhere: a Suspended belief in our lock is over too.
			w := retryWindow{since: now}
			if p := m.shards.get(r.Shard); p.state == shardPending && retry {
				w = p.retry
				w.holder = r.Holder
			}
			m.moveLocked(r.Shard, pendingIn(w))
		case storage.Failed:
			if !errors.Is(r.Err, storage.ErrInvalid) {
				storageErr = r.Err
			}
		}
	}
	m.mu.Unlock()
	m.notify.deliver()
	m.storageResult("acquire", storageErr)
}

// retryDue reports whether a pending shard's retry window is open.
func (m *Manager) retryDue() bool {
	if m.cfg.AcquireRetryWindow == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for _, s := range m.shards.inState(shardPending) {
		if now.Sub(m.shards.get(s).retry.since) <= m.cfg.AcquireRetryWindow {
			return true
		}
	}
	return false
}

// windowExhausted reports (once per window) pending shards whose retry
// window ran out: a warning, a count, and a shorter wait for the next
// rebalance, which opens a new window.
func (m *Manager) windowExhausted() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	var shards []string
	for _, s := range m.shards.inState(shardPending) {
		w := m.shards.get(s).retry
		if !w.exhausted && time.Since(w.since) > m.cfg.AcquireRetryWindow {
			w.exhausted = true
			m.moveLocked(s, pendingIn(w))
			shards = append(shards, s.String())
		}
	}
	if len(shards) == 0 {
		return false
	}
	slices.Sort(shards)
	m.metrics.retryWindowExhausts.Inc()
	m.log.Warn("acquire retry window exhausted with shards still held elsewhere; the membership stream or the next rebalance will take them",
		"shards", shards, "window", m.cfg.AcquireRetryWindow)
	return true
}

// own records an acquired (or re-verified) lock as Owned, under mu, if the
// attachment of gen is still live; otherwise it is kept Suspended for
// re-verification. An Owned shard stays as it is.
func (m *Manager) own(gen uint64, s storage.ShardID, epoch, lease int64) {
	if m.shards.get(s).state == shardOwned {
		return
	}
	actx, g, ok := m.machine.Attachment()
	if !ok || g != gen || !m.attached || m.gen != gen {
		m.moveLocked(s, suspendedAt(epoch))
		return
	}
	ctx, cancel := context.WithCancelCause(actx)
	o := &owned{Ownership: Ownership{Shard: s, Epoch: epoch, LeaseID: lease, Since: time.Now(), Ctx: ctx,
		Enforcement: m.checkedEnforcement}, cancel: cancel}
	if !m.moveLocked(s, ownedAs(o)) {
		cancel(errShardTransition)
		return
	}
	m.notify.push(notice{o: o.Ownership})
}

// checkedEnforcement is the machine's Enforcement after its deadline
// check (detachment.Machine.Check): work asks before it starts, and must
// not be told "live" by a decision whose cutoff has passed while the
// process was paused and its timer has not run yet.
func (m *Manager) checkedEnforcement() detachment.Enforcement {
	m.machine.Check()
	return m.machine.Enforcement()
}
