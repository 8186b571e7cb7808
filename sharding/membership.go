package sharding

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// The membership view — runners, lock holders, and the assignment derived
// from them — is built from one stream that carries runners/ and shards/
// together in revision order (storage.MembershipReader.WatchMembership), and
// from listings of both read at one revision (the stream's own, and the
// safety pass's fresh reads). Invariant: between batches the view is the
// state of both prefixes at viewRev, never a lock change without the
// runner change that explains it. So every runner that has seen a
// revision computes the same assignment for it, and a shard released for
// a newcomer is never taken by a runner that has not heard of the
// newcomer yet.

// watchMembership forwards the membership stream to the loop, which is its
// only consumer: the view changes in one goroutine, in stream order.
func (m *Manager) watchMembership(ctx context.Context) {
	for b := range m.store.WatchMembership(ctx) {
		select {
		case m.membership <- b:
		case <-ctx.Done():
			return
		}
	}
}

// lockChange is a change of one shard's lock that the view absorbed, for
// the loop to react to.
type lockChange struct {
	shard storage.ShardID
	kind  storage.EventKind
	lock  storage.ShardLock // zero on delete
	rev   int64             // revision of the change (a listing's for a lock found gone)
}

// absorbed is what a set of batches changed in the view.
type absorbed struct {
	locks   []lockChange
	runners bool // the runner view changed
}

// absorbLocked applies batches in order, under mu. A batch, or an event of
// a batch, no newer than the view is skipped: a fresh listing may have
// overtaken the stream.
func (m *Manager) absorbLocked(batches []storage.MembershipBatch) absorbed {
	var a absorbed
	now := time.Now()
	for _, b := range batches {
		if b.Listing {
			if b.Revision > m.viewRev {
				m.replaceViewLocked(b, &a, now)
				m.viewRev = b.Revision
			}
			continue
		}
		m.recordBatchLocked(b, now)
		for _, ev := range b.Events {
			if ev.Revision() <= m.viewRev {
				continue
			}
			switch {
			case ev.Runner != nil:
				m.applyRunnerLocked(*ev.Runner)
				a.runners = true
			case ev.Lock != nil:
				if c, ok := m.applyLockLocked(*ev.Lock); ok {
					a.locks = append(a.locks, c)
				}
			}
		}
		m.viewRev = max(m.viewRev, b.Revision)
	}
	return a
}

func (m *Manager) applyRunnerLocked(ev storage.RunnerEvent) {
	if ev.Kind == storage.EventPut && ev.Err == nil {
		m.runners[ev.ID] = ev.Runner
		return
	}
	if ev.Err != nil {
		m.log.Error("undecodable runner record; treating the runner as absent", "runner", ev.ID, "err", ev.Err)
	}
	delete(m.runners, ev.ID)
}

// applyLockLocked records a lock change in the holders; an undecodable
// lock record is logged and leaves the view as it was.
func (m *Manager) applyLockLocked(ev storage.LockEvent) (lockChange, bool) {
	if ev.Err != nil {
		m.log.Error("undecodable shard lock record", "shard", ev.Shard.String(), "err", ev.Err)
		return lockChange{}, false
	}
	if ev.Kind == storage.EventDelete {
		m.freeLocked(ev.Shard)
		return lockChange{shard: ev.Shard, kind: storage.EventDelete, rev: ev.Revision}, true
	}
	m.shards.observeHeld(ev.Shard, ev.Lock.RunnerID)
	return lockChange{shard: ev.Shard, kind: storage.EventPut, lock: ev.Lock, rev: ev.Revision}, true
}

// freeLocked records that shard's lock is gone, remembering its last holder
// (see shardRecord.freedBy). A lock of ours believed held while nothing
// runs (Suspended) is gone with it.
func (m *Manager) freeLocked(s storage.ShardID) {
	if m.shards.get(s).state == shardSuspended {
		m.moveLocked(s, free())
	}
	m.shards.observeFreed(s)
}

// replaceViewLocked makes a listing the view: runners and holders are
// replaced, and every lock the view held that the listing lacks counts as
// deleted at the listing's revision.
func (m *Manager) replaceViewLocked(b storage.MembershipBatch, a *absorbed, now time.Time) {
	runners := map[string]storage.RunnerInfo{}
	held := map[storage.ShardID]storage.ShardLock{}
	for _, ev := range b.Events {
		switch {
		case ev.Runner != nil && ev.Runner.Kind == storage.EventPut:
			if ev.Runner.Err != nil {
				m.log.Error("undecodable runner record; treating the runner as absent", "runner", ev.Runner.ID, "err", ev.Runner.Err)
				continue
			}
			runners[ev.Runner.ID] = ev.Runner.Runner
		case ev.Lock != nil && ev.Lock.Kind == storage.EventPut:
			if ev.Lock.Err != nil {
				m.log.Error("undecodable shard lock record", "shard", ev.Lock.Shard.String(), "err", ev.Lock.Err)
				continue
			}
			held[ev.Lock.Shard] = ev.Lock.Lock
		}
	}
	m.recordListingLocked(held, runners, now)
	if !maps.EqualFunc(runners, m.runners, sameRunner) {
		a.runners = true
	}
	clear(m.runners)
	maps.Copy(m.runners, runners)
	// Gone: the locks the view held, and ours though the view may not show
	// them yet. A Suspended lock missing from the listing is gone too.
	var gone, suspendedGone []storage.ShardID
	for s, rec := range m.shards.all() {
		if _, ok := held[s]; ok {
			continue
		}
		switch {
		case rec.held || rec.state == shardOwned:
			gone = append(gone, s)
		case rec.state == shardSuspended:
			suspendedGone = append(suspendedGone, s)
		}
	}
	for _, s := range gone {
		m.freeLocked(s)
		a.locks = append(a.locks, lockChange{shard: s, kind: storage.EventDelete, rev: b.Revision})
	}
	for _, s := range suspendedGone {
		m.moveLocked(s, free())
	}
	for s, l := range held {
		if rec := m.shards.get(s); rec.holder == l.RunnerID && (rec.state != shardOwned || rec.epoch == l.Epoch) {
			continue // nothing new about it
		}
		m.shards.observeHeld(s, l.RunnerID)
		a.locks = append(a.locks, lockChange{shard: s, kind: storage.EventPut, lock: l, rev: l.Epoch})
	}
}

func sameRunner(a, b storage.RunnerInfo) bool {
	return a.ID == b.ID && a.Weight == b.Weight && a.Addr == b.Addr && a.Version == b.Version &&
		a.StartedAt.Equal(b.StartedAt) && equalStrings(a.Groups, b.Groups)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// readMembership reads a fresh listing and absorbs it (it replaces the view
// when newer); ok reports whether the store answered.
func (m *Manager) readMembership(ctx context.Context) (r reaction, ok bool) {
	l, err := m.store.Membership(ctx)
	m.storageResult("membership", err)
	if err != nil && !errors.Is(err, storage.ErrCorrupt) {
		return reaction{}, false
	}
	if err != nil {
		m.log.Error("ignoring undecodable membership records", "err", err)
	}
	return m.absorb([]storage.MembershipBatch{l}), true
}

// recompute derives the assignment from the runner view and the current
// lock holders (see placement.Reassign: shards stay with their holders
// while those stay within their load band). This runner always counts
// itself with its own weight (0 while draining), whatever the view says:
// its record may not have reached the watch yet.
func (m *Manager) recompute() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recomputeLocked()
}

func (m *Manager) recomputeLocked() {
	cands := make([]placement.Candidate, 0, len(m.runners)+1)
	for id, r := range m.runners {
		if id == m.self.ID {
			continue
		}
		cands = append(cands, placement.Candidate{ID: id, Weight: r.Weight, Groups: r.Groups})
	}
	self := placement.Candidate{ID: m.self.ID, Weight: m.self.Weight, Groups: m.self.Groups}
	if m.draining {
		self.Weight = 0
	}
	cands = append(cands, self)
	m.assignment = m.proc.Reassign(m.meta.Groups, m.meta.Shards, cands, m.shards.holders())
	n := 0
	for _, r := range m.assignment {
		if r == m.self.ID {
			n++
		}
	}
	for _, s := range m.shards.inState(shardPending) { // no longer ours to wait for
		if m.assignment[s] != m.self.ID {
			m.moveLocked(s, free())
		}
	}
	m.metrics.assigned.Set(float64(n))
}

// mustRebalance reports whether the assignment takes away a shard we own,
// under mu.
func (m *Manager) mustRebalance() bool {
	for _, s := range m.shards.inState(shardOwned) {
		if m.assignment[s] != m.self.ID {
			return true
		}
	}
	return false
}
