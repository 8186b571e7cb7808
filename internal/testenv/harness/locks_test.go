package harness

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

func shard(i int) storage.ShardID { return storage.ShardID{Group: storage.DefaultGroup, Index: i} }

func put(s storage.ShardID, runner string, epoch int64) storage.LockEvent {
	return storage.LockEvent{Kind: storage.EventPut, Shard: s, Lock: storage.ShardLock{Shard: s, RunnerID: runner, Epoch: epoch}}
}

func del(s storage.ShardID) storage.LockEvent {
	return storage.LockEvent{Kind: storage.EventDelete, Shard: s}
}

// TestLockLogJudgesTenures: the audit's lock check, on hand-made
// timelines. An execution is inside its runner's tenure when the tenure
// (holder and epoch) is in the log, even if the watch delivered it after
// the execution began (a recorded soak once flagged nine executions so, right
// after etcd regained its leader: the test's watch, cut off with the
// runners, learnt of their locks late), and outside it when a change that
// ends the tenure arrived before the execution ended.
func TestLockLogJudgesTenures(t *testing.T) {
	sh := shard(3)
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	type change struct {
		ms int
		ev storage.LockEvent
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	acquired := func(ms int, holder string, epoch int64) change { return change{ms, put(sh, holder, epoch)} }
	released := func(ms int) change { return change{ms, del(sh)} }
	relisted := func(c change) change { c.ev.Resync = true; return c }
	// The execution: runner r, epoch 5, from 1000 to 2000 ms.
	for _, tc := range []struct {
		name string
		log  []change
		held bool
	}{
		{"acquired before, never released", []change{acquired(0, "r", 5)}, true},
		{"acquired before, released after", []change{acquired(0, "r", 5), released(2500)}, true},
		{"tenure delivered late, during the execution", []change{acquired(0, "q", 4), released(100), relisted(acquired(1500, "r", 5))}, true},
		{"tenure delivered after the execution", []change{relisted(acquired(2500, "r", 5))}, true},
		{"the same tenure listed again", []change{acquired(0, "r", 5), relisted(acquired(1500, "r", 5))}, true},
		{"released during the execution", []change{acquired(0, "r", 5), released(1500)}, false},
		{"released before the execution", []change{acquired(0, "r", 5), released(500)}, false},
		{"taken by another during the execution", []change{acquired(0, "r", 5), acquired(1500, "q", 9)}, false},
		{"a newer tenure of the same runner before the end", []change{acquired(0, "r", 5), released(1200), acquired(1300, "r", 7)}, false},
		{"never held under that epoch", []change{acquired(0, "r", 4)}, false},
		{"never held", nil, false},
	} {
		l := NewLockTimeline()
		for _, c := range tc.log {
			l.Record(at(c.ms), c.ev)
		}
		if got := l.HeldThroughout(sh, "r", 5, at(1000), at(2000)); got != tc.held {
			t.Errorf("%s: held %v, want %v (%s)", tc.name, got, tc.held, l.Around(sh, at(1000), at(2000), time.Hour))
		}
	}
}

// TestPolledLockLogJudgesAcquisition: on a polled timeline (coordination
// on S3, observations up to one poll late) the acquisition edge is judged
// by time as well, with exactly the poll lag: a tenure first observed more
// than the lag after the execution began was not the runner's when it
// began, unless a re-listing after a failed poll first showed it. The
// release edge and the epoch are judged as on an etcd timeline.
func TestPolledLockLogJudgesAcquisition(t *testing.T) {
	sh := shard(3)
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const lag = 200 * time.Millisecond
	type change struct {
		ms     int
		ev     storage.LockEvent
		resync bool
	}
	// The execution: runner r, epoch 5, from 1000 to 2000 ms.
	for _, tc := range []struct {
		name string
		log  []change
		held bool
	}{
		{"observed before the start", []change{{0, put(sh, "r", 5), false}}, true},
		{"observed within the lag of the start", []change{{1200, put(sh, "r", 5), false}}, true},
		{"observed just past the lag", []change{{1201, put(sh, "r", 5), false}}, false},
		{"observed after the execution", []change{{2500, put(sh, "r", 5), false}}, false},
		{"first shown by a re-listing, late", []change{{2500, put(sh, "r", 5), true}}, true},
		{"released during the execution", []change{{0, put(sh, "r", 5), false}, {1500, del(sh), false}}, false},
		{"taken by another just after the end", []change{{0, put(sh, "r", 5), false}, {2001, put(sh, "q", 6), false}}, true},
		// A poll judged the lease lapsed and dropped its locks; the holder
		// renewed it after all, and the next poll shows the same tenure
		// again (a recorded S3 soak, 2026-12-02: 42 executions after the
		// renewal were flagged against the first span's end).
		{"in the span after a lapse the holder renewed", []change{{0, put(sh, "r", 5), false}, {700, del(sh), false}, {900, put(sh, "r", 5), false}}, true},
		{"the renewal observed within the lag of the start", []change{{0, put(sh, "r", 5), false}, {900, del(sh), false}, {1200, put(sh, "r", 5), false}}, true},
		{"the renewal observed past the lag", []change{{0, put(sh, "r", 5), false}, {900, del(sh), false}, {1201, put(sh, "r", 5), false}}, false},
		{"the renewal first shown by a re-listing, late", []change{{0, put(sh, "r", 5), false}, {900, del(sh), false}, {1500, put(sh, "r", 5), true}}, false},
		{"running when the lapse was observed", []change{{0, put(sh, "r", 5), false}, {1050, del(sh), false}, {1100, put(sh, "r", 5), false}}, false},
		{"ended by a lapse during the second span", []change{{0, put(sh, "r", 5), false}, {700, del(sh), false}, {900, put(sh, "r", 5), false}, {1500, del(sh), false}}, false},
		{"another holder between the spans", []change{{0, put(sh, "r", 5), false}, {700, put(sh, "q", 6), false}, {900, put(sh, "r", 5), false}}, false},
	} {
		l := NewPolledLockTimeline(lag)
		for _, c := range tc.log {
			ev := c.ev
			ev.Resync = c.resync
			l.Record(at(c.ms), ev)
		}
		if got := l.HeldThroughout(sh, "r", 5, at(1000), at(2000)); got != tc.held {
			t.Errorf("%s: held %v, want %v (%s)", tc.name, got, tc.held, l.Around(sh, at(1000), at(2000), time.Hour))
		}
	}
}

// TestLockTimelineAwait: Await returns the arrival time of the event that
// first satisfied the condition, not a later one.
func TestLockTimelineAwait(t *testing.T) {
	l := NewLockTimeline()
	t0 := time.Unix(1000, 0)
	l.Record(t0, put(shard(0), "a", 1))
	l.Record(t0, put(shard(1), "a", 2))
	movedToB := func(h map[storage.ShardID]string) bool { return h[shard(0)] == "b" && h[shard(1)] == "b" }
	got := make(chan time.Time, 1)
	errc := make(chan error, 1)
	go func() {
		at, err := l.Await(context.Background(), "the move", 10*time.Second, movedToB)
		got <- at
		errc <- err
	}()
	// Record the events only once the waiter is registered, so that the
	// arrival time comes from the events.
	waiters := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.waiters)
	}
	testenv.WaitFor(t, "the waiter to register", 10*time.Second, func() bool { return waiters() == 1 })
	l.Record(t0.Add(1*time.Second), del(shard(0)))
	l.Record(t0.Add(2*time.Second), put(shard(0), "b", 3))
	l.Record(t0.Add(3*time.Second), del(shard(1)))
	l.Record(t0.Add(4*time.Second), put(shard(1), "b", 4))
	l.Record(t0.Add(5*time.Second), put(shard(2), "c", 5)) // later, unrelated
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if at := <-got; !at.Equal(t0.Add(4 * time.Second)) {
		t.Fatalf("Await returned %v, want the satisfying event's time %v", at, t0.Add(4*time.Second))
	}
	// Already true: returns at once.
	if _, err := l.Await(context.Background(), "the move", time.Millisecond, movedToB); err != nil {
		t.Fatalf("Await of a holding condition: %v", err)
	}
	// Never true: a clear timeout naming what was awaited.
	_, err := l.Await(context.Background(), "shard 9 to be locked", 20*time.Millisecond, func(h map[storage.ShardID]string) bool { return h[shard(9)] != "" })
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "shard 9 to be locked") {
		t.Fatalf("Await timeout: %v, want an ErrTimeout naming the condition", err)
	}
	// Cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Await(ctx, "x", time.Minute, func(map[storage.ShardID]string) bool { return false }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Await with a cancelled context: %v", err)
	}
	if n := waiters(); n != 0 {
		t.Fatalf("%d waiters left registered", n)
	}
}

// TestLockTimelineSince: Since lists the changes of holder only (a lock
// listed again under its holder is none), each with the holder before it.
func TestLockTimelineSince(t *testing.T) {
	l := NewLockTimeline()
	t0 := time.Unix(1000, 0)
	l.Record(t0, put(shard(0), "v", 1))
	relisted := put(shard(0), "v", 1)
	relisted.Resync = true
	l.Record(t0.Add(time.Second), relisted)
	l.Record(t0.Add(2*time.Second), del(shard(0)))
	l.Record(t0.Add(3*time.Second), put(shard(0), "w", 2))
	got := l.Since(t0.Add(time.Millisecond))
	if len(got) != 2 || got[0].Prev != "v" || got[0].Holder != "" || got[1].Prev != "" || got[1].Holder != "w" || got[1].Epoch != 2 {
		t.Fatalf("Since = %+v, want v's release then w's lock", got)
	}
	if h := l.Holders(); len(h) != 1 || h[shard(0)] != "w" {
		t.Fatalf("Holders = %v", h)
	}
}

// TestWatchLocksFollowsEtcd: a timeline fed by a real watch sees a
// runner's locks taken and released, and ends with its context.
func TestWatchLocksFollowsEtcd(t *testing.T) {
	c := New(t, Spec{Etcd: testenv.SharedEtcd(t).Endpoint(), Prefix: testenv.Prefix(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	watcher, err := c.Store(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	l := WatchLocks(wctx, watcher)
	member, err := c.Store(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	ss, err := member.Register(ctx, storage.RunnerInfo{ID: "r", Weight: 1, Groups: []string{storage.DefaultGroup}}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close(context.Background())
	go storage.KeepAliveLoop(ctx, ss, storage.KeepAliveCadence{}, nil) // its lease lives as long as the test needs
	if _, err := ss.AcquireShards(ctx, []storage.ShardID{shard(0), shard(1)}); err != nil {
		t.Fatal(err)
	}
	both := func(h map[storage.ShardID]string) bool { return h[shard(0)] == "r" && h[shard(1)] == "r" }
	if _, err := l.Await(ctx, "r's two locks", 10*time.Second, both); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := ss.ReleaseShard(ctx, shard(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Await(ctx, "shard 0 released", 10*time.Second, func(h map[storage.ShardID]string) bool { return h[shard(0)] == "" }); err != nil {
		t.Fatal(err)
	}
	if ch := l.Since(released); len(ch) != 1 || ch[0].Shard != shard(0) || ch[0].Prev != "r" || ch[0].Holder != "" {
		t.Fatalf("changes since the release: %+v", ch)
	}
	stop()
	l.Wait()
	if _, err := l.Await(ctx, "anything", time.Second, func(map[storage.ShardID]string) bool { return false }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Await after the watch ended: %v", err)
	}
}
