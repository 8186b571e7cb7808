package sharding

import (
	"context"

	"github.com/tenurehq/tenure/storage"
)

// watchRunners keeps the runner view current from the runners/ watch and
// recomputes the assignment on every change; releases and acquisitions wait
// for the debounced rebalance.
func (m *Manager) watchRunners(ctx context.Context) {
	for ev := range m.store.WatchRunners(ctx) {
		m.mu.Lock()
		if ev.Revision != 0 && ev.Revision <= m.runnersRev {
			m.mu.Unlock()
			continue // a listing at least as new already holds it
		}
		m.runnersRev = max(m.runnersRev, ev.Revision)
		if ev.Kind == storage.EventPut && ev.Err == nil {
			m.runners[ev.ID] = ev.Runner
		} else {
			if ev.Err != nil {
				m.log.Error("undecodable runner record; treating the runner as absent", "runner", ev.ID, "err", ev.Err)
			}
			delete(m.runners, ev.ID)
		}
		m.mu.Unlock()
		m.recompute()
		m.debounce.call()
	}
}

// watchLocks forwards shard-lock changes to the loop.
func (m *Manager) watchLocks(ctx context.Context) {
	for ev := range m.store.WatchShardLocks(ctx) {
		select {
		case m.lockEvents <- ev:
		case <-ctx.Done():
			return
		}
	}
}

// setRunners replaces the runner view with a listing read at rev, unless
// the view already reflects a later revision (rev 0: unknown, applied).
func (m *Manager) setRunners(list []storage.RunnerInfo, rev int64) {
	m.mu.Lock()
	if rev != 0 && rev < m.runnersRev {
		m.mu.Unlock()
		return
	}
	m.runnersRev = max(m.runnersRev, rev)
	clear(m.runners)
	for _, r := range list {
		m.runners[r.ID] = r
	}
	m.mu.Unlock()
	m.recompute()
}

// recompute derives the assignment from the runner view and the current
// lock holders (see Reassign: shards stay with their holders while those
// stay within their load band). This runner always counts itself with its
// own weight (0 while draining), whatever the view says: its record may not
// have reached the watch yet.
func (m *Manager) recompute() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recomputeLocked()
}

func (m *Manager) recomputeLocked() {
	cands := make([]Candidate, 0, len(m.runners)+1)
	for id, r := range m.runners {
		if id == m.self.ID {
			continue
		}
		cands = append(cands, Candidate{ID: id, Weight: r.Weight, Groups: r.Groups})
	}
	self := Candidate{ID: m.self.ID, Weight: m.self.Weight, Groups: m.self.Groups}
	if m.draining {
		self.Weight = 0
	}
	cands = append(cands, self)
	m.assignment = Reassign(m.meta.Groups, m.meta.Shards, cands, m.holders)
	n := 0
	for _, r := range m.assignment {
		if r == m.self.ID {
			n++
		}
	}
	for s := range m.pending { // no longer ours to wait for
		if m.assignment[s] != m.self.ID {
			delete(m.pending, s)
		}
	}
	m.metrics.assigned.Set(float64(n))
}

// mustRebalance reports whether the assignment takes away a shard we own,
// under mu.
func (m *Manager) mustRebalance() bool {
	for s := range m.owned {
		if m.assignment[s] != m.self.ID {
			return true
		}
	}
	return false
}
