package sharding

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// unusedStore is a Store no call reaches: the history test feeds the
// view by hand.
type unusedStore struct{ Store }

// historyManager is a manager that never runs, for feeding its view
// batches by hand.
func historyManager(t *testing.T) *Manager {
	t.Helper()
	meta := storage.ClusterMeta{Shards: 4, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName}
	m, err := New(unusedStore{}, storage.RunnerInfo{ID: "me", Weight: 1}, meta, testConfig(), WithRegistry(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.machine.Close)
	return m
}

func runnerPut(id string, rev int64) storage.MembershipEvent {
	return storage.MembershipEvent{Runner: &storage.RunnerEvent{Kind: storage.EventPut, ID: id, Runner: storage.RunnerInfo{ID: id, Weight: 1}, Revision: rev}}
}

func runnerDelete(id string, rev int64) storage.MembershipEvent {
	return storage.MembershipEvent{Runner: &storage.RunnerEvent{Kind: storage.EventDelete, ID: id, Revision: rev}}
}

func lockPut(shard int, holder string, rev int64) storage.MembershipEvent {
	s := storage.ShardID{Group: storage.DefaultGroup, Index: shard}
	return storage.MembershipEvent{Lock: &storage.LockEvent{Kind: storage.EventPut, Shard: s, Revision: rev,
		Lock: storage.ShardLock{Shard: s, RunnerID: holder, Epoch: rev, AcquiredAt: time.Unix(rev, 0)}}}
}

func lockDelete(shard int, rev int64) storage.MembershipEvent {
	return storage.MembershipEvent{Lock: &storage.LockEvent{Kind: storage.EventDelete, Shard: storage.ShardID{Group: storage.DefaultGroup, Index: shard}, Revision: rev}}
}

// kinds renders a history as "kind:runner:epoch" items.
func kinds(h []LockEvent) []string {
	out := make([]string, len(h))
	for i, e := range h {
		out[i] = fmt.Sprintf("%s:%s:%d", e.Kind, e.Runner, e.Epoch)
	}
	return out
}

// TestLockHistoryClassifies: the history of a shard says acquired for a
// free shard's lock, released for a delete while the holder stays
// registered, lost for a delete that goes with the holder's registration
// (one revision), taken_over for the next holder after a loss or for a
// change of hands with no delete seen (a listing after a break); it
// keeps the last LockHistoryLen changes, oldest first.
func TestLockHistoryClassifies(t *testing.T) {
	m := historyManager(t)
	s0 := storage.ShardID{Group: storage.DefaultGroup, Index: 0}
	s1 := storage.ShardID{Group: storage.DefaultGroup, Index: 1}

	// A first listing: r1 holds shard 0 since its acquisition time.
	m.absorb([]storage.MembershipBatch{{Revision: 10, Listing: true, Events: []storage.MembershipEvent{
		runnerPut("r1", 5), runnerPut("r2", 6), lockPut(0, "r1", 7)}}})
	h := m.LockHistory(s0)
	if want := []string{"acquired:r1:7"}; !slices.Equal(kinds(h), want) || !h[0].At.Equal(time.Unix(7, 0).UTC()) {
		t.Fatalf("after the first listing: %v (at %s), want %v at the lock's acquisition", kinds(h), h[0].At, want)
	}
	// r1 releases it (a hand-over) and r2 acquires it.
	m.absorb([]storage.MembershipBatch{{Revision: 11, Events: []storage.MembershipEvent{lockDelete(0, 11)}}})
	m.absorb([]storage.MembershipBatch{{Revision: 12, Events: []storage.MembershipEvent{lockPut(0, "r2", 12)}}})
	// r2's lease ends: its registration and its lock go in one revision
	// (the lock's delete first in the batch); r1 takes the shard over.
	m.absorb([]storage.MembershipBatch{{Revision: 13, Events: []storage.MembershipEvent{lockDelete(0, 13), runnerDelete("r2", 13)}}})
	m.absorb([]storage.MembershipBatch{{Revision: 14, Events: []storage.MembershipEvent{lockPut(0, "r1", 14)}}})
	want := []string{"acquired:r1:7", "released:r1:7", "acquired:r2:12", "lost:r2:12", "taken_over:r1:14"}
	if got := kinds(m.LockHistory(s0)); !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	if h := m.LockHistory(s0); h[4].Detail == "" || h[3].Detail == "" {
		t.Errorf("a loss and a takeover say why: %+v", h)
	}
	// An event no newer than the view changes nothing.
	m.absorb([]storage.MembershipBatch{{Revision: 14, Events: []storage.MembershipEvent{lockDelete(0, 14)}}})
	if got := kinds(m.LockHistory(s0)); len(got) != len(want) {
		t.Fatalf("an old event was recorded: %v", got)
	}

	// A resync listing that shows shard 0 held by r3 (whose delete and
	// put the stream missed) and shard 1 by r1 records a takeover and an
	// acquisition.
	m.absorb([]storage.MembershipBatch{{Revision: 20, Listing: true, Resync: true, Events: []storage.MembershipEvent{
		runnerPut("r1", 5), runnerPut("r3", 15), lockPut(0, "r3", 16), lockPut(1, "r1", 17)}}})
	if h := m.LockHistory(s0); h[len(h)-1].Kind != LockTakenOver || h[len(h)-1].Runner != "r3" {
		t.Errorf("after the resync listing, shard 0: %v", kinds(h))
	}
	if got := kinds(m.LockHistory(s1)); !slices.Equal(got, []string{"acquired:r1:17"}) {
		t.Errorf("after the resync listing, shard 1: %v", got)
	}
	// A listing without shard 1's lock, whose holder is still listed:
	// released.
	m.absorb([]storage.MembershipBatch{{Revision: 21, Listing: true, Resync: true, Events: []storage.MembershipEvent{
		runnerPut("r1", 5), runnerPut("r3", 15), lockPut(0, "r3", 16)}}})
	if got := kinds(m.LockHistory(s1)); !slices.Equal(got, []string{"acquired:r1:17", "released:r1:17"}) {
		t.Errorf("shard 1 gone from a listing: %v", got)
	}

	// The ring keeps the last LockHistoryLen changes, oldest first.
	s2 := storage.ShardID{Group: storage.DefaultGroup, Index: 2}
	rev := int64(100)
	for range LockHistoryLen {
		m.absorb([]storage.MembershipBatch{{Revision: rev, Events: []storage.MembershipEvent{lockPut(2, "r1", rev)}}})
		m.absorb([]storage.MembershipBatch{{Revision: rev + 1, Events: []storage.MembershipEvent{lockDelete(2, rev+1)}}})
		rev += 2
	}
	h = m.LockHistory(s2)
	if len(h) != LockHistoryLen || h[0].Epoch != 100+LockHistoryLen || h[len(h)-1].Kind != LockReleased || h[len(h)-1].Epoch != rev-2 {
		t.Fatalf("ring of %d: first %+v, last %+v; want the last %d changes, oldest first", len(h), h[0], h[len(h)-1], LockHistoryLen)
	}
	for i := 1; i < len(h); i++ {
		if h[i].Epoch < h[i-1].Epoch {
			t.Fatalf("ring out of order at %d: %v", i, kinds(h))
		}
	}
	if got := m.LockHistory(storage.ShardID{Group: storage.DefaultGroup, Index: 3}); got == nil || len(got) != 0 {
		t.Errorf("a shard never seen: %v, want an empty list", got)
	}
}

// TestLockHistoryOnCluster: on real runners, the history a runner keeps
// shows the hand-over of a joining runner (released by the first,
// acquired by the newcomer) and, when the newcomer stops and its lease is
// revoked, its locks lost and taken over.
func TestLockHistoryOnCluster(t *testing.T) {
	testenv.CheckLeaks(t)
	c := newCluster(t, 8, testConfig())
	r1 := c.start("r1", 1)
	c.waitConverged(c.members(), 15*time.Second)
	r2 := c.start("r2", 1)
	own := c.waitConverged(c.members(), 15*time.Second)
	var moved storage.ShardID
	found := false
	for s, id := range own {
		if id == "r2" {
			moved, found = s, true
			break
		}
	}
	if !found {
		t.Fatal("r2 owns no shard after joining")
	}
	testenv.WaitFor(t, "r1 sees the hand-over of "+moved.String(), 10*time.Second, func() bool {
		h := r1.mgr.LockHistory(moved)
		n := len(h)
		return n >= 3 && h[n-2].Kind == LockReleased && h[n-2].Runner == "r1" && h[n-1].Kind == LockAcquired && h[n-1].Runner == "r2"
	})
	r2.stop(t)
	testenv.WaitFor(t, "r1 sees r2's lock lost and takes it over", 15*time.Second, func() bool {
		h := r1.mgr.LockHistory(moved)
		n := len(h)
		return n >= 2 && h[n-2].Kind == LockLost && h[n-2].Runner == "r2" && h[n-1].Kind == LockTakenOver && h[n-1].Runner == "r1"
	})
	if h := r1.mgr.LockHistory(moved); len(h) > LockHistoryLen {
		t.Errorf("history of %d changes", len(h))
	}
}
