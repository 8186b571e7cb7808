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
// the given ones when only is non-nil). With retry it tries only the
// pending shards (held elsewhere) that are due a retry (retryableLocked),
// and counts the tries. A shard found held elsewhere opens a new retry
// window unless this is a retry. Nothing is acquired before the start-up
// settle ends (settle.go).
func (m *Manager) acquireWanted(ctx context.Context, retry bool, only ...storage.ShardID) {
	_, gen, ss, ok := m.attachedGen()
	if !ok || m.settleLeft(time.Now()) > 0 {
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
		if retry && !m.retryableLocked(r, now) {
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
			w := retryWindow{since: now, waiting: now}
			if p := m.shards.get(r.Shard); p.state == shardPending {
				if retry {
					w = p.retry
				}
				w.waiting = p.retry.waiting
			}
			w.holder = r.Holder
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

// polledLocked reports whether a pending shard is one the retries poll
// for: one whose lock the membership view shows free (our try lost a race
// for it, or the stream has not yet shown the holder our try met). A
// shard whose lock the view shows held is not polled: the stream reports
// the lock's deletion (a release, or its holder's lease expiring) — as an
// event, or, before the stream's first listing and after a break, in the
// listing that follows, where a lock the view held and the listing lacks
// counts as deleted (replaceViewLocked) — and absorb acquires the shard
// then (lockevents.go). Polling it would only load etcd with transactions
// that fail, from every runner waiting for a shard, while the holders
// release. Should the stream stay silent, the safety pass's fresh
// listing finds the deletion the same way. Under mu.
func (m *Manager) polledLocked(r shardRecord) bool {
	return r.state == shardPending && !r.held
}

// retryableLocked reports whether a pending shard is due a retry: it is
// polled (polledLocked) and its retry window is open. Under mu.
func (m *Manager) retryableLocked(r shardRecord, now time.Time) bool {
	return m.polledLocked(r) && now.Sub(r.retry.since) <= m.cfg.AcquireRetryWindow
}

// retryDue reports whether a pending shard is due a retry.
func (m *Manager) retryDue() bool {
	if m.cfg.AcquireRetryWindow == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for _, s := range m.shards.inState(shardPending) {
		if m.retryableLocked(m.shards.get(s), now) {
			return true
		}
	}
	return false
}

// windowExhausted reports (once per window) the polled pending shards
// whose retry window ran out: a warning, a count, and a shorter wait for
// the next rebalance, which opens a new window. A shard that waits for
// the stream (its lock held in the view) has nothing to exhaust.
func (m *Manager) windowExhausted() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	var shards []string
	for _, s := range m.shards.inState(shardPending) {
		r := m.shards.get(s)
		w := r.retry
		if !w.exhausted && m.polledLocked(r) && time.Since(w.since) > m.cfg.AcquireRetryWindow {
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

// reportStuck warns of the shards that have been Pending — assigned here,
// their locks held elsewhere — for longer than a safety pass interval:
// a hand-over takes far less, so their holder is not releasing them
// (detached, or stopped without revoking its lease). It is called after
// each safety pass, which tried them once more; the shards are taken the
// moment the stream shows their locks deleted, so this is a report, not
// a retry. Loop goroutine.
func (m *Manager) reportStuck(now time.Time) {
	m.mu.Lock()
	var shards, holders []string
	var longest time.Duration
	for _, s := range m.shards.inState(shardPending) {
		r := m.shards.get(s)
		if d := now.Sub(r.retry.waiting); !r.retry.waiting.IsZero() && d > m.cfg.RebalanceInterval {
			shards = append(shards, s.String())
			if !slices.Contains(holders, r.retry.holder) {
				holders = append(holders, r.retry.holder)
			}
			longest = max(longest, d)
		}
	}
	m.mu.Unlock()
	if len(shards) == 0 {
		return
	}
	slices.Sort(shards)
	slices.Sort(holders)
	m.log.Warn("shards assigned here are still held elsewhere; they are taken when the membership stream shows their locks deleted",
		"shards", shards, "holders", holders, "waiting", longest.Round(time.Millisecond))
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
