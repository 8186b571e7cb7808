package sharding

import (
	"context"
	"errors"
	"maps"
	"slices"

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
	// The holders feed the assignment: recompute it before deciding.
	m.recomputeLocked()
	r := reaction{rebalance: a.runners || m.mustRebalance()}
	wanted := map[storage.ShardID]bool{}
	for _, c := range a.locks {
		o, own := m.owned[c.shard]
		// A change older than our lock (say the previous holder's delete,
		// still queued when we acquired) says nothing about it.
		if own && c.rev >= o.Epoch && (c.kind == storage.EventDelete || c.lock.LeaseID != lease || c.lock.Epoch != o.Epoch) {
			m.log.Warn("shard lock lost", "shard", c.shard.String(), "epoch", o.Epoch, "event", c.kind.String(), "holder", c.lock.RunnerID)
			m.lose(c.shard, LossLockLost, errors.New("membership stream: lock deleted or taken by another lease"))
			own = false
		}
		if c.kind == storage.EventDelete && !own && m.assignment[c.shard] == m.self.ID {
			wanted[c.shard] = true
		}
	}
	// A shard freed by a departing runner and meant for another successor
	// becomes ours when a later change turns it to us — that successor
	// drains or leaves too before taking it, or (in a cluster on
	// ProcedureV1, whose hand-overs are not path-stable) the successors'
	// acquisitions turn it. Take it as soon as our view says it is ours,
	// not at the next rebalance. Only shards whose last holder is leaving
	// (drained or gone) qualify: one released by a live runner is in
	// transit to its new owner. Pending shards keep to their retry window.
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
// registered. It looks only at freedBy, which holds just the shards whose
// lock is gone, so it stays cheap on every lock event. Under mu.
func (m *Manager) freedByLeavingLocked() []storage.ShardID {
	var out []storage.ShardID
	for s, last := range m.freedBy {
		if m.assignment[s] != m.self.ID || m.holders[s] != "" || last == m.self.ID {
			continue
		}
		if r, registered := m.runners[last]; registered && r.Weight > 0 {
			continue // a live runner's release: in transit to a newcomer
		}
		_, own := m.owned[s]
		_, pending := m.pending[s]
		if !own && !pending {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, cmpShard)
	return out
}

// verify checks every owned lock with one read; a lock that is not ours any
// more interrupts its shard now.
func (m *Manager) verify(ctx context.Context) {
	_, gen, ss, ok := m.attachedGen()
	if !ok {
		return
	}
	m.mu.Lock()
	shards := slices.Collect(maps.Keys(m.owned))
	m.mu.Unlock()
	if len(shards) == 0 {
		return
	}
	res, err := ss.VerifyShards(ctx, shards)
	m.storageResult("verify", err)
	if err != nil {
		return
	}
	m.mu.Lock()
	if m.gen == gen {
		for _, r := range res {
			if o, own := m.owned[r.Shard]; own && (!r.Owned || r.Epoch != o.Epoch) {
				m.log.Warn("shard lock lost", "shard", r.Shard.String(), "epoch", o.Epoch, "holder", r.Holder)
				m.lose(r.Shard, LossLockLost, errors.New("lock verification: not held by this lease"))
			}
		}
	}
	m.mu.Unlock()
	m.notify.deliver()
}

// lose ends an ownership without handoff, under mu.
func (m *Manager) lose(s storage.ShardID, reason LossReason, err error) {
	o, ok := m.owned[s]
	if !ok {
		return
	}
	delete(m.owned, s)
	o.cancel(&LostError{Shard: s, Epoch: o.Epoch, Reason: reason, Err: err})
	m.notify.push(notice{o: o.Ownership, lost: true, reason: reason})
	m.metrics.owned.Set(float64(len(m.owned)))
	if reason == LossLockLost {
		m.metrics.locksLost.Inc()
	}
}
