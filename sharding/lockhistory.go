package sharding

import (
	"slices"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// LockHistoryLen is how many lock changes a Manager keeps per shard
// (LockHistory): the most recent ones, the older ones dropped.
const LockHistoryLen = 50

// LockEventKind says what happened to a shard's lock.
type LockEventKind string

const (
	// LockAcquired: a runner created the lock of a free shard (one whose
	// previous holder released it, or one seen held in a listing, the
	// first time this runner saw it).
	LockAcquired LockEventKind = "acquired"
	// LockReleased: the lock was deleted while its holder was still
	// registered: a planned hand-over (rebalance, drain).
	LockReleased LockEventKind = "released"
	// LockLost: the lock was deleted with its holder's registration (its
	// lease expired or was revoked), or it went missing from a listing
	// together with its holder.
	LockLost LockEventKind = "lost"
	// LockTakenOver: a runner created the lock of a shard whose previous
	// holder lost it (LockLost), or the lock changed hands without a
	// delete this runner saw (a listing after a break of its stream).
	LockTakenOver LockEventKind = "taken_over"
)

// LockEvent is one change of a shard's lock as this runner's membership
// stream showed it.
type LockEvent struct {
	// At is when this runner saw the change (its clock); for a lock first
	// seen held in a listing, the holder's acquisition time.
	At     time.Time     `json:"at"`
	Kind   LockEventKind `json:"event"`
	Runner string        `json:"runner"` // the holder that acquired, released or lost it
	Epoch  int64         `json:"epoch"`  // the lock's epoch (fencing token)
	// Detail says more where the kind alone does not: the previous holder
	// of a lock taken over, how a change was seen.
	Detail string `json:"detail"`
}

// lockHistory keeps, per shard, the last LockHistoryLen lock changes and
// the lock last seen held, to classify the next change. It is the view's:
// only membership.go changes it, under the manager's mu. Its cost per lock
// event is two map lookups and a ring write: it runs on every one.
type lockHistory struct {
	shards map[storage.ShardID]*shardLockLog
}

// shardLockLog is one shard's lock changes (a ring) and what the next one
// is classified against.
type shardLockLog struct {
	ring  []LockEvent // at most LockHistoryLen, oldest at next once full
	next  int
	held  storage.ShardLock // the lock last seen held (RunnerID "" when none)
	lost  bool              // the last delete was a loss: the next acquisition is a takeover
	since string            // the holder of the lock before the last delete, for a takeover's detail
}

func newLockHistory() lockHistory {
	return lockHistory{shards: map[storage.ShardID]*shardLockLog{}}
}

func (h *lockHistory) log(s storage.ShardID) *shardLockLog {
	l := h.shards[s]
	if l == nil {
		l = &shardLockLog{ring: make([]LockEvent, 0, 4)}
		h.shards[s] = l
	}
	return l
}

func (l *shardLockLog) add(e LockEvent) {
	if len(l.ring) < LockHistoryLen {
		l.ring = append(l.ring, e)
		return
	}
	l.ring[l.next] = e
	l.next = (l.next + 1) % LockHistoryLen
}

// put records a lock seen held: an acquisition, a takeover, or nothing
// new (the lock the log already holds). listed says it came from a
// listing, which carries no time of its own.
func (h *lockHistory) put(lock storage.ShardLock, now time.Time, listed bool) {
	l := h.log(lock.Shard)
	if l.held.RunnerID == lock.RunnerID && l.held.Epoch == lock.Epoch {
		return
	}
	e := LockEvent{At: now, Kind: LockAcquired, Runner: lock.RunnerID, Epoch: lock.Epoch}
	switch {
	case l.held.RunnerID != "":
		// It changed hands without a delete we saw.
		e.Kind, e.Detail = LockTakenOver, "from "+l.held.RunnerID+" (no release seen)"
	case l.lost && l.since != "":
		e.Kind, e.Detail = LockTakenOver, "from "+l.since+" (its lease ended)"
	}
	if listed {
		e.Detail = joinDetail(e.Detail, "seen in a listing")
		if !lock.AcquiredAt.IsZero() && e.Kind == LockAcquired {
			e.At = lock.AcquiredAt.UTC()
		}
	}
	l.add(e)
	l.held, l.lost, l.since = lock, false, ""
}

// deleted records the lock's delete: lost when its holder's registration
// went with it (gone), released otherwise.
func (h *lockHistory) deleted(s storage.ShardID, gone bool, now time.Time, detail string) {
	l := h.log(s)
	if l.held.RunnerID == "" {
		return // a delete of a lock never seen held: nothing to say
	}
	e := LockEvent{At: now, Kind: LockReleased, Runner: l.held.RunnerID, Epoch: l.held.Epoch, Detail: detail}
	if gone {
		e.Kind = LockLost
		e.Detail = joinDetail("its holder's lease ended", detail)
	}
	l.add(e)
	l.lost, l.since = gone, l.held.RunnerID
	l.held = storage.ShardLock{}
}

// holder returns the runner last seen holding s's lock ("" if none).
func (h *lockHistory) holder(s storage.ShardID) string {
	if l := h.shards[s]; l != nil {
		return l.held.RunnerID
	}
	return ""
}

// events returns s's changes, oldest first.
func (h *lockHistory) events(s storage.ShardID) []LockEvent {
	l := h.shards[s]
	if l == nil {
		return []LockEvent{}
	}
	out := make([]LockEvent, 0, len(l.ring))
	out = append(out, l.ring[l.next:]...)
	return append(out, l.ring[:l.next]...)
}

func joinDetail(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// LockHistory returns the recent changes of shard's lock as this runner's
// membership stream showed them, oldest first: at most LockHistoryLen,
// since the manager started. It is cheap (a copy under the manager's
// lock), for status pages.
func (m *Manager) LockHistory(shard storage.ShardID) []LockEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.history.events(shard)
}

// recordBatchLocked records the lock changes of one stream batch in the
// history, under mu, before the view applies them. A lock deleted in the
// batch at the revision its holder's registration was deleted at, or
// whose holder the view no longer has, went with its holder's lease
// (lost); any other delete is a release.
func (m *Manager) recordBatchLocked(b storage.MembershipBatch, now time.Time) {
	var gone map[string]int64 // runner → revision of its delete in this batch
	for _, ev := range b.Events {
		if ev.Runner != nil && ev.Runner.Kind == storage.EventDelete {
			if gone == nil {
				gone = map[string]int64{}
			}
			gone[ev.Runner.ID] = ev.Runner.Revision
		}
	}
	for _, ev := range b.Events {
		if ev.Lock == nil || ev.Lock.Err != nil || ev.Lock.Revision <= m.viewRev {
			continue
		}
		if ev.Lock.Kind == storage.EventPut {
			m.history.put(ev.Lock.Lock, now, false)
			continue
		}
		holder := m.history.holder(ev.Lock.Shard)
		rev, goneNow := gone[holder]
		_, registered := m.runners[holder]
		m.history.deleted(ev.Lock.Shard, (goneNow && rev == ev.Lock.Revision) || (!registered && !goneNow), now, "")
	}
}

// recordListingLocked records what a listing that replaces the view
// shows changed: locks gone (lost if their holder is gone too), locks
// held by someone new. runners are the listing's runners.
func (m *Manager) recordListingLocked(held map[storage.ShardID]storage.ShardLock, runners map[string]storage.RunnerInfo, now time.Time) {
	for s, l := range m.history.shards {
		if l.held.RunnerID == "" {
			continue
		}
		if _, ok := held[s]; ok {
			continue
		}
		_, registered := runners[l.held.RunnerID]
		m.history.deleted(s, !registered, now, "seen in a listing")
	}
	shards := make([]storage.ShardID, 0, len(held))
	for s := range held {
		shards = append(shards, s)
	}
	slices.SortFunc(shards, cmpShard)
	for _, s := range shards {
		m.history.put(held[s], now, true)
	}
}
