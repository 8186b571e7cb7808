package harness

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// TestRevokedAndTakenAt: a lease's revocation is the first arrival of the
// runner's deletes, one revision for all of them; releases one by one are
// several; TakenAt is the last arrival of the successor's locks.
func TestRevokedAndTakenAt(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	withRev := func(ev storage.LockEvent, rev int64) storage.LockEvent { ev.Revision = rev; return ev }
	shards := []storage.ShardID{shard(0), shard(1)}

	l := NewLockTimeline()
	l.Record(at(0), withRev(put(shard(0), "a", 1), 1))
	l.Record(at(0), withRev(put(shard(1), "a", 2), 2))
	l.Record(at(0), withRev(put(shard(2), "b", 3), 3))
	l.Record(at(100), withRev(del(shard(0)), 4))
	l.Record(at(101), withRev(del(shard(1)), 4))
	l.Record(at(102), withRev(del(shard(2)), 4)) // not one of shards
	l.Record(at(150), withRev(put(shard(1), "b", 5), 5))
	l.Record(at(160), withRev(put(shard(0), "b", 6), 6))
	if got, once := l.RevokedAt("a", shards, at(50)); !got.Equal(at(100)) || !once {
		t.Errorf("RevokedAt = %v %v, want %v at one revision", got, once, at(100))
	}
	if got := l.TakenAt("b", shards, at(50)); !got.Equal(at(160)) {
		t.Errorf("TakenAt = %v, want %v", got, at(160))
	}
	if got, _ := l.RevokedAt("a", shards, at(200)); !got.IsZero() {
		t.Errorf("RevokedAt after the deletes = %v, want zero", got)
	}

	l = NewLockTimeline()
	l.Record(at(0), withRev(put(shard(0), "a", 1), 1))
	l.Record(at(0), withRev(put(shard(1), "a", 2), 2))
	l.Record(at(100), withRev(del(shard(0)), 3))
	l.Record(at(110), withRev(del(shard(1)), 4))
	if got, once := l.RevokedAt("a", shards, at(50)); !got.Equal(at(100)) || once {
		t.Errorf("RevokedAt of releases one by one = %v %v, want %v at several revisions", got, once, at(100))
	}
}
