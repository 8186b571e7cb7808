package sharding

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// onMembership absorbs the membership batch b, and every batch already
// queued behind it so that a burst costs one acquisition, and reacts: a
// rebalance soon if the runners changed or a shard we own is no longer
// ours, an acquisition now of the free shards the view gives us.
func (m *Manager) onMembership(ctx context.Context, b storage.MembershipBatch) {
	batches := []storage.MembershipBatch{b}
	for more := true; more; {
		select {
		case b := <-m.membership:
			batches = append(batches, b)
		default:
			more = false
		}
	}
	batches = m.trackStream(batches)
	if len(batches) == 0 {
		return
	}
	r := m.absorb(batches)
	if r.rebalance {
		m.debounce.call()
	}
	if len(r.wanted) > 0 {
		m.acquireWanted(ctx, false, r.wanted...)
	}
}

// reaction is what absorbing membership changes calls for.
type reaction struct {
	wanted    []storage.ShardID // free shards the view gives us: acquire now
	rebalance bool              // the runners changed, or an owned shard is no longer ours
}

// absorb applies membership batches to the view, recomputes the assignment,
// and settles what the lock changes mean at once: our lock deleted or taken
// means the shard is lost now; a deleted lock the view gives us is wanted
// now, without waiting for a poll.
func (m *Manager) absorb(batches []storage.MembershipBatch) reaction {
	m.mu.Lock()
	lease := int64(0)
	if m.session != nil {
		lease = m.session.LeaseID()
	}
	a := m.absorbLocked(batches)
	if a.runners {
		m.runnersChanged(time.Now())
	}
	// The holders feed the assignment: recompute it before deciding.
	m.recomputeLocked()
	r := reaction{rebalance: a.runners || m.mustRebalance()}
	wanted := map[storage.ShardID]bool{}
	for _, c := range a.locks {
		rec := m.shards.get(c.shard)
		own := rec.state == shardOwned
		// A change older than our lock (say the previous holder's delete,
		// still queued when we acquired) says nothing about it.
		if own && c.rev >= rec.epoch && (c.kind == storage.EventDelete || c.lock.LeaseID != lease || c.lock.Epoch != rec.epoch) {
			m.log.Warn("shard lock lost", "shard", c.shard.String(), "epoch", rec.epoch, "event", c.kind.String(), "holder", c.lock.RunnerID)
			m.lose(c.shard, LossLockLost, errors.New("membership stream: lock deleted or taken by another lease"))
			own = false
		}
		if c.kind == storage.EventDelete && !own && m.assignment[c.shard] == m.self.ID {
			wanted[c.shard] = true
		}
		if m.strayPut(c, lease) {
			r.rebalance = true // its assignee waits: release it soon (stray.go)
		}
	}
	// A shard freed by a departing runner and meant for another successor
	// becomes ours when a later change turns it to us — that successor
	// drains or leaves too before taking it, or (in a cluster on
	// placement.ProcedureV1, whose hand-overs are not path-stable) the
	// successors' acquisitions turn it. Take it as soon as our view says it
	// is ours, not at the next rebalance. Only shards whose last holder is
	// leaving (drained or gone) qualify: one released by a live runner is
	// in transit to its new owner. Pending shards keep to their retry
	// window.
	for _, s := range m.freedByLeavingLocked() {
		wanted[s] = true
	}
	m.mu.Unlock()
	m.notify.deliver()
	r.wanted = slices.SortedFunc(maps.Keys(wanted), cmpShard)
	return r
}

// freedByLeavingLocked returns, sorted, the free shards the assignment
// gives us, that we do not own and are not retrying (pending), whose last
// holder is leaving in our view: drained (weight 0) or no longer
// registered. It scans the shard table, which costs less than the
// recompute every membership batch makes anyway. Under mu.
func (m *Manager) freedByLeavingLocked() []storage.ShardID {
	var out []storage.ShardID
	for s, rec := range m.shards.all() {
		// A shard freed by someone has no lock held in the view (see
		// shardRecord.check).
		last := rec.freedBy
		if last == "" || m.assignment[s] != m.self.ID || last == m.self.ID {
			continue
		}
		if r, registered := m.runners[last]; registered && r.Weight > 0 {
			continue // a live runner's release: in transit to a newcomer
		}
		if rec.state != shardOwned && rec.state != shardPending {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, cmpShard)
	return out
}

// trackStream follows whether the membership stream is in sync — after a
// listing it is, until it reports a break — and returns the batches that
// carry changes (a break carries none).
func (m *Manager) trackStream(batches []storage.MembershipBatch) []storage.MembershipBatch {
	out := batches[:0]
	for _, b := range batches {
		switch {
		case b.Interrupted:
			m.streamInSync = false
			continue
		case b.Listing:
			m.streamInSync = true
		}
		out = append(out, b)
	}
	return out
}

// refreshLocks verifies the owned locks with a read only while the
// membership stream is out of sync (between a break and the listing that
// resumes it). While it is in sync a read would tell nothing the stream
// has not: etcd's watch delivers every change of the watched range in
// revision order, or ends with an error the store reports as a break (a
// client-side reconnect resumes at the next revision, or fails as
// compacted); so a lock of ours deleted or re-created under another lease
// reaches absorb as an event, which loses the shard at once, and the
// listing that resumes a broken stream reads every lock, absorbed the
// same way. Reads remain after a break (here, each LockRefreshInterval
// until the listing comes), on re-attach (reattach) and at the safety
// pass (its fresh listing, absorbed the same way). None of this bounds
// how long a runner cut off from etcd keeps its shards: the detachment
// machine does, from the lease deadline alone, whatever the stream
// reports.
func (m *Manager) refreshLocks(ctx context.Context) {
	if !m.streamInSync {
		m.verify(ctx)
	}
}

// verify checks every owned lock with one read; a lock that is not ours any
// more interrupts its shard now.
func (m *Manager) verify(ctx context.Context) {
	gen, _, res, ok := m.verifyState(ctx, shardOwned)
	if !ok {
		return
	}
	m.mu.Lock()
	if m.gen == gen {
		for _, r := range res {
			if rec := m.shards.get(r.Shard); rec.state == shardOwned && (!r.Owned || r.Epoch != rec.epoch) {
				m.log.Warn("shard lock lost", "shard", r.Shard.String(), "epoch", rec.epoch, "holder", r.Holder)
				m.lose(r.Shard, LossLockLost, errors.New("lock verification: not held by this lease"))
			}
		}
	}
	m.mu.Unlock()
	m.notify.deliver()
}

// lose ends an ownership without handoff, under mu.
func (m *Manager) lose(s storage.ShardID, reason LossReason, err error) {
	rec := m.shards.get(s)
	if rec.state != shardOwned || !m.moveLocked(s, free()) {
		return
	}
	o := rec.own
	o.cancel(&LostError{Shard: s, Epoch: o.Epoch, Reason: reason, Err: err})
	m.notify.push(notice{o: o.Ownership, lost: true, reason: reason})
	if reason == LossLockLost {
		m.metrics.locksLost.Inc()
	}
}

// verifyState reads, with one VerifyShards call while attached, the locks of
// the shards in state st. It reports false when there is nothing to act on:
// detached, no such shard, or the read failed (the next pass tries again).
func (m *Manager) verifyState(ctx context.Context, st shardState) (uint64, storage.Session, []storage.VerifyResult, bool) {
	_, gen, ss, ok := m.attachedGen()
	if !ok {
		return 0, nil, nil, false
	}
	m.mu.Lock()
	shards := m.shards.inState(st)
	m.mu.Unlock()
	if len(shards) == 0 {
		return 0, nil, nil, false
	}
	res, err := ss.VerifyShards(ctx, shards)
	m.storageResult("verify", err)
	if err != nil {
		return 0, nil, nil, false
	}
	return gen, ss, res, true
}
