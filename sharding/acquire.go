package sharding

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

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
	for s := range m.pending { // shards no longer assigned stop being pending
		if !mine[s] {
			delete(m.pending, s)
		}
	}
	candidates := slices.Collect(maps.Keys(mine))
	if only != nil {
		candidates = only
	}
	var want []storage.ShardID
	for _, s := range candidates {
		if _, own := m.owned[s]; own || !mine[s] {
			continue
		}
		if retry {
			if p, ok := m.pending[s]; !ok || now.Sub(p.since) > m.cfg.AcquireRetryWindow {
				continue
			}
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
			delete(m.pending, r.Shard)
			m.own(gen, r.Shard, r.Epoch, ss.LeaseID())
		case storage.Held:
			if p, ok := m.pending[r.Shard]; !ok || !retry {
				m.pending[r.Shard] = &pendingShard{since: now}
			} else {
				p.holder = r.Holder
			}
		case storage.Failed:
			if !errors.Is(r.Err, storage.ErrInvalid) {
				storageErr = r.Err
			}
		}
	}
	m.metrics.owned.Set(float64(len(m.owned)))
	m.mu.Unlock()
	m.notify.deliver()
	m.storageResult("acquire", storageErr)
}

// pendingShard is a shard assigned to us but held elsewhere.
type pendingShard struct {
	since     time.Time // when the current retry window opened
	holder    string
	exhausted bool // its window ran out and was reported
}

// retryDue reports whether a pending shard's retry window is open.
func (m *Manager) retryDue() bool {
	if m.cfg.AcquireRetryWindow == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for _, p := range m.pending {
		if now.Sub(p.since) <= m.cfg.AcquireRetryWindow {
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
	for s, p := range m.pending {
		if !p.exhausted && time.Since(p.since) > m.cfg.AcquireRetryWindow {
			p.exhausted = true
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

// own records an acquired lock as owned, under mu, if the attachment of gen
// is still live; otherwise it is kept as suspended for re-verification.
func (m *Manager) own(gen uint64, s storage.ShardID, epoch, lease int64) {
	actx, g, ok := m.machine.Attachment()
	if !ok || g != gen || !m.attached || m.gen != gen {
		m.suspended[s] = epoch
		return
	}
	if _, dup := m.owned[s]; dup {
		return
	}
	ctx, cancel := context.WithCancelCause(actx)
	o := &owned{Ownership: Ownership{Shard: s, Epoch: epoch, LeaseID: lease, Since: time.Now(), Ctx: ctx,
		Enforcement: m.machine.Enforcement}, cancel: cancel}
	m.owned[s] = o
	delete(m.suspended, s)
	m.notify.push(notice{o: o.Ownership})
}
