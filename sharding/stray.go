package sharding

import (
	"context"
	"errors"
	"slices"

	"github.com/tenurehq/tenure/storage"
)

// A stray lock is a lock our lease may hold while nothing of ours runs on
// its shard: a Suspended shard (a release whose delete failed, or a
// detachment's lock before reattach verified it), or a Free shard that
// the membership view shows held by us. The second arises on a polled
// store (s3coord): a listing that missed our lock — it was written while
// the listing ran, or the listing judged our lease lapsed just before its
// renewal landed — made us lose a lock our lease still held, and the next
// poll shows it again, under the same epoch. A stray of a shard the
// assignment gives us is acquired again by acquireWanted (a lock of our
// lease is Acquired at its epoch). One the assignment gives to another
// runner must be released: its assignee waits for the lock's deletion,
// and nothing else deletes it while our lease lives.

// straysLocked returns, sorted, the shards whose lock may be a stray of
// ours and that the assignment mine does not give us. Under mu.
func (m *Manager) straysLocked(mine map[storage.ShardID]bool) []storage.ShardID {
	var out []storage.ShardID
	for s, r := range m.shards.all() {
		if mine[s] {
			continue
		}
		if r.state == shardSuspended || (r.state == shardFree && r.held && r.holder == m.self.ID) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, cmpShard)
	return out
}

// releaseStrays verifies the candidate strays with one read and deletes
// those our lease holds; a Suspended one found not ours is Free. A lock of
// another lease (a previous incarnation's, under our id) is left to its
// lease. Nothing runs on these shards, so there is nothing to interrupt or
// requeue: their tasks were left to takeover when the shard was lost or
// detached. Loop goroutine.
func (m *Manager) releaseStrays(ctx context.Context, shards []storage.ShardID) {
	if len(shards) == 0 {
		return
	}
	_, _, ss, ok := m.attachedGen()
	if !ok {
		return
	}
	res, err := ss.VerifyShards(ctx, shards)
	m.storageResult("verify", err)
	if err != nil {
		return // the next pass tries again
	}
	var released []string
	for _, r := range res {
		if r.Owned {
			err := ss.ReleaseShard(ctx, r.Shard)
			m.storageResult("release", err)
			if err != nil && !errors.Is(err, storage.ErrNotOwner) {
				m.log.Warn("releasing a stray lock of ours failed; the next pass tries again", "shard", r.Shard.String(), "err", err)
				if ctx.Err() != nil {
					return
				}
				continue
			}
			if err == nil {
				released = append(released, r.Shard.String())
				m.metrics.straysReleased.Inc()
			}
		}
		m.mu.Lock()
		if m.shards.get(r.Shard).state == shardSuspended {
			m.moveLocked(r.Shard, free())
		}
		m.mu.Unlock()
	}
	if len(released) > 0 {
		m.log.Warn("released locks of ours that nothing ran on, for their assignees (a listing had missed them, or a release had failed)",
			"shards", released)
	}
}

// retryStrays releases, at each acquire retry tick, the Suspended strays
// of shards assigned elsewhere: a release whose delete failed is tried
// again within AcquireRetryInterval, not at the next pass, which may come
// a whole RebalanceInterval later — past the storage-error grace that the
// failure started, when a healthy store would have answered the retry.
// While attached nothing else is Suspended for long. Loop goroutine.
func (m *Manager) retryStrays(ctx context.Context) {
	if _, _, _, ok := m.attachedGen(); !ok {
		return
	}
	mine := m.assigned()
	m.mu.Lock()
	out := m.assignedElsewhereLocked(shardSuspended, mine)
	m.mu.Unlock()
	m.releaseStrays(ctx, out)
}

// assignedElsewhereLocked returns, sorted, the shards in state st that the
// assignment mine does not give us. Under mu.
func (m *Manager) assignedElsewhereLocked(st shardState, mine map[storage.ShardID]bool) []storage.ShardID {
	var out []storage.ShardID
	for _, s := range m.shards.inState(st) {
		if !mine[s] {
			out = append(out, s)
		}
	}
	return out
}

// strayPut reports whether a lock put the view absorbed shows a lock of
// lease (ours) on a shard where nothing of ours runs and that the
// assignment gives to another runner: a stray for the next pass. Under mu.
func (m *Manager) strayPut(c lockChange, lease int64) bool {
	if c.kind != storage.EventPut || lease == 0 || c.lock.LeaseID != lease || m.assignment[c.shard] == m.self.ID {
		return false
	}
	st := m.shards.get(c.shard).state
	return st == shardFree || st == shardSuspended
}
