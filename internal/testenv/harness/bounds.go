package harness

import (
	"slices"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// The bounds the tests time moves of shards by, so that the suite
// holds on a busy machine. A bound tells the mechanism under test from
// the next slower one that could make the same move, and leaves the
// machine the slack in between. How fast a mechanism is on a quiet machine
// (milliseconds for a watch) is the benchmarks' and `tenure bench`'s to
// measure: a bound of milliseconds on a machine shared with builds
// measures the machine.

// TimersAway is where a test sets the timers that could move a shard
// without a watch event (the rebalance loop's safety pass, the acquire
// retries): past the end of the test, so that a shard moves on a watch
// event or not in time.
const TimersAway = time.Minute

// WatchBound bounds a move driven by etcd watches among runners whose
// timers are TimersAway: a sixth of that, so that no timer can have made
// it, with seconds of slack for a loaded machine.
const WatchBound = TimersAway / 6

// LessorTick is how often etcd's lessor looks for expired leases to
// revoke.
const LessorTick = 500 * time.Millisecond

// RevokeBound bounds, from the crash of a runner whose lease has TTL ttl,
// its lease's revocation as an observer's watch sees it. Its last renewal
// reached etcd before the crash, so the lease expires at most ttl after
// it; etcd's lessor finds it on its next LessorTick; and etcd must apply
// the revocation (a raft entry, fsynced) and the watch deliver it: a
// second for those two on a machine whose disk and cores builds share.
func RevokeBound(ttl time.Duration) time.Duration { return ttl + LessorTick + time.Second }

// RevokedAt returns when the first of runner's locks of shards deleted
// since from arrived, and whether they all went at one revision, as a
// lease's revocation deletes its keys (zero and false if none went).
func (l *LockTimeline) RevokedAt(runner string, shards []storage.ShardID, from time.Time) (time.Time, bool) {
	var at time.Time
	revs := map[int64]bool{}
	for _, ch := range l.Since(from) {
		if ch.Prev != runner || ch.Holder != "" || !slices.Contains(shards, ch.Shard) {
			continue
		}
		if at.IsZero() {
			at = ch.At
		}
		revs[ch.Rev] = true
	}
	return at, len(revs) == 1
}

// TakenAt returns when the last of shards locked by runner since from
// arrived (zero if none was).
func (l *LockTimeline) TakenAt(runner string, shards []storage.ShardID, from time.Time) time.Time {
	var at time.Time
	for _, ch := range l.Since(from) {
		if ch.Holder == runner && slices.Contains(shards, ch.Shard) {
			at = ch.At
		}
	}
	return at
}
