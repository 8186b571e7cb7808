package storagetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
)

func testLocks(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	sa, sb := h.Open(t, ns), h.Open(t, ns)
	a, b := register(t, sa, "lock-a", longTTL), register(t, sb, "lock-b", longTTL)
	ctx := ctxT(t)
	// More shards than one transaction batch, across two groups, with a
	// duplicate.
	want := append(shards("default", 0, 300), shards("jobs", 0, 20)...)
	want = append(want, storage.ShardID{Group: "default", Index: 7})
	res, err := a.AcquireShards(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	epochs := map[storage.ShardID]int64{}
	for i, r := range res {
		if r.Shard != want[i] || r.Status != storage.Acquired || r.Epoch <= 0 || r.Err != nil {
			t.Fatalf("acquire %v: %+v", want[i], r)
		}
		epochs[r.Shard] = r.Epoch
	}
	// Acquiring again is idempotent: same epochs.
	again, err := a.AcquireShards(ctx, shards("default", 0, 10))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range again {
		if r.Status != storage.Acquired || r.Epoch != epochs[r.Shard] {
			t.Fatalf("re-acquire by the holder: %+v, want acquired at epoch %d", r, epochs[r.Shard])
		}
	}
	// Another lease cannot take them and learns the holder.
	held, err := b.AcquireShards(ctx, append(shards("default", 295, 5), shards("default", 300, 2)...))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range held[:5] {
		if r.Status != storage.Held || r.Holder != "lock-a" {
			t.Fatalf("acquire of a held lock: %+v, want held by lock-a", r)
		}
	}
	for _, r := range held[5:] {
		if r.Status != storage.Acquired {
			t.Fatalf("acquire of a free lock: %+v", r)
		}
	}
	locks, rev, err := sb.ShardLocks(ctx)
	if err != nil || rev <= 0 || len(locks) != 322 {
		t.Fatalf("ShardLocks: %d locks, rev %d, %v", len(locks), rev, err)
	}
	for _, l := range locks {
		if l.Shard.Index < 300 || l.Shard.Group == "jobs" {
			if l.RunnerID != "lock-a" || l.LeaseID != a.LeaseID() || l.Epoch != epochs[l.Shard] || l.AcquiredAt.IsZero() {
				t.Fatalf("lock %+v, want lock-a at epoch %d", l, epochs[l.Shard])
			}
		}
	}
	// Verify by the holder: one read, all owned.
	ver, err := a.VerifyShards(ctx, want[:320])
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range ver {
		if !v.Owned || v.Epoch != epochs[v.Shard] {
			t.Fatalf("verify %+v", v)
		}
	}
	ver, err = b.VerifyShards(ctx, shards("default", 0, 1))
	if err != nil || ver[0].Owned || ver[0].Holder != "lock-a" {
		t.Fatalf("verify by a non-holder: %+v, %v", ver, err)
	}
	// Release: only the holder can; releasing twice is fine.
	sh := storage.ShardID{Group: "default", Index: 0}
	if err := b.ReleaseShard(ctx, sh); !errors.Is(err, storage.ErrNotOwner) {
		t.Fatalf("release by a non-holder: got %v, want ErrNotOwner", err)
	}
	if err := a.ReleaseShard(ctx, sh); err != nil {
		t.Fatalf("release by the holder: %v", err)
	}
	if err := a.ReleaseShard(ctx, sh); err != nil {
		t.Fatalf("second release: %v", err)
	}
	// The next holder's epoch is greater: a fencing token.
	next, err := b.AcquireShards(ctx, []storage.ShardID{sh})
	if err != nil || next[0].Status != storage.Acquired || next[0].Epoch <= epochs[sh] {
		t.Fatalf("acquire after release: %+v, %v (previous epoch %d)", next, err, epochs[sh])
	}
}

func testConcurrentAcquire(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	const contenders = 8
	want := shards("default", 0, 64)
	sessions := make([]storage.Session, contenders)
	for i := range sessions {
		sessions[i] = register(t, h.Open(t, ns), "contender-"+string(rune('a'+i)), longTTL)
	}
	for round := 0; round < 3; round++ {
		owners := make([]map[storage.ShardID]bool, contenders)
		var wg sync.WaitGroup
		for i, ss := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := ss.AcquireShards(ctxT(t), want)
				if err != nil {
					t.Errorf("contender %d: %v", i, err)
					return
				}
				owners[i] = map[storage.ShardID]bool{}
				for _, r := range res {
					switch r.Status {
					case storage.Acquired:
						owners[i][r.Shard] = true
					case storage.Held:
					default:
						t.Errorf("contender %d shard %v: %+v", i, r.Shard, r)
					}
				}
			}()
		}
		wg.Wait()
		for _, sh := range want {
			n := 0
			for i := range owners {
				if owners[i][sh] {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("round %d: shard %v acquired by %d contenders, want exactly 1", round, sh, n)
			}
		}
		for i, ss := range sessions {
			for sh := range owners[i] {
				if err := ss.ReleaseShard(ctxT(t), sh); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// testHandoffByWatch: a runner waiting for a held shard acquires it within
// the watch delay (100ms on etcd) of the holder's release, woken by the lock
// watch rather than by a retry of its own. The bound applies to the median
// of the rounds (and every round must be under a second, or ten watch
// delays where that is longer), so that one round descheduled on a loaded
// machine does not fail a property the other rounds show.
func testHandoffByWatch(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	sa, sb := h.Open(t, ns), h.Open(t, ns)
	a, b := register(t, sa, "holder", longTTL), register(t, sb, "waiter", longTTL)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var gaps []time.Duration
	for round := 0; round < 5; round++ {
		sh := storage.ShardID{Group: "default", Index: round}
		if res, _ := a.AcquireShards(ctx, []storage.ShardID{sh}); res[0].Status != storage.Acquired {
			t.Fatalf("holder acquire: %+v", res[0])
		}
		events := sb.WatchShardLocks(ctx)
		// The waiter tries once, finds it held, then waits for the watch.
		if res, _ := b.AcquireShards(ctx, []storage.ShardID{sh}); res[0].Status != storage.Held {
			t.Fatalf("waiter's first attempt: %+v", res[0])
		}
		acquired := make(chan time.Time, 1)
		watching := make(chan struct{})
		go func() {
			for ev := range events {
				if ev.Shard != sh {
					continue
				}
				if ev.Kind == storage.EventPut {
					close(watching) // the watch has listed the held lock
					continue
				}
				res, err := b.AcquireShards(ctx, []storage.ShardID{sh})
				if err == nil && res[0].Status == storage.Acquired {
					acquired <- time.Now()
					return
				}
			}
		}()
		select {
		case <-watching:
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter's watch never listed the held lock")
		}
		released := time.Now() // the release call is counted in the gap
		if err := a.ReleaseShard(ctx, sh); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-acquired:
			gap := at.Sub(released)
			if gap > max(time.Second, 10*h.watchDelay()) {
				t.Fatalf("round %d: waiter acquired %s after the release; want ≤ %s", round, gap, h.watchDelay())
			}
			gaps = append(gaps, gap)
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: waiter never acquired the released shard", round)
		}
	}
	slices.Sort(gaps)
	if med := gaps[len(gaps)/2]; med > h.watchDelay() {
		t.Fatalf("waiter acquired a median %s after the release (rounds %v); want ≤ %s", med, gaps, h.watchDelay())
	}
	t.Logf("release → waiter acquired: %v", gaps)
}

func testVerifyDetectsDelete(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	s := h.Open(t, ns)
	ss := register(t, s, "victim", longTTL)
	ctx := ctxT(t)
	want := shards("default", 0, 4)
	if _, err := ss.AcquireShards(ctx, want); err != nil {
		t.Fatal(err)
	}
	h.DeleteKey(t, ns, "shards/default/2")
	ver, err := ss.VerifyShards(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range ver {
		if v.Owned == (v.Shard.Index == 2) {
			t.Fatalf("verify after shards/default/2 was deleted: %+v", ver)
		}
	}
}
