package sharding

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/storage"
)

// TestLockLossInterruptsAtOnce: a lock deleted behind the owner's back
// interrupts the shard through the watch, and the owner takes it back under
// a new epoch.
func TestLockLossInterruptsAtOnce(t *testing.T) {
	c := newCluster(t, 4, testConfig())
	r := c.start("solo", 1)
	c.waitConverged(c.members(), 10*time.Second)
	o := r.mgr.Owned()[0]
	cli := c.srv.Client(t)
	deletedAt := time.Now()
	if _, err := cli.Delete(context.Background(), c.Prefix+"shards/"+o.Shard.Group+"/"+strconv.Itoa(o.Shard.Index)); err != nil {
		t.Fatal(err)
	}
	// Which path found the loss is in the cause (the membership stream, or
	// the lock verification of the refresh pass), not in how soon: the
	// bound only ends a wait for an interruption that never comes.
	select {
	case <-o.Ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("shard context not cancelled within 10s of its lock's deletion")
	}
	var lost *LostError
	if !errors.As(context.Cause(o.Ctx), &lost) || lost.Reason != LossLockLost {
		t.Fatalf("cause %v, want LossLockLost", context.Cause(o.Ctx))
	}
	if !strings.Contains(lost.Error(), "membership stream") {
		t.Fatalf("cause %v, want the loss found by the membership stream (the watch)", lost)
	}
	t.Logf("interrupted %s after the delete", time.Since(deletedAt))
	testenv.WaitFor(t, "re-acquisition", 5*time.Second, func() bool {
		for _, n := range r.mgr.Owned() {
			if n.Shard == o.Shard {
				if n.Epoch <= o.Epoch {
					t.Fatalf("re-acquired at epoch %d ≤ %d", n.Epoch, o.Epoch)
				}
				return true
			}
		}
		return false
	})
	if v := testutil.ToFloat64(r.mgr.metrics.locksLost); v != 1 {
		t.Fatalf("locks_lost_total = %v", v)
	}
}

// foreignHolder takes shard locks with a plain session, as another runner
// that is not part of the assignment would.
func foreignHolder(t *testing.T, c *cluster, shards []storage.ShardID) storage.Session {
	t.Helper()
	ss, err := c.store().Register(context.Background(), storage.RunnerInfo{ID: "foreign", Weight: 0}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close(context.Background()) })
	go storage.KeepAliveLoop(context.Background(), ss, storage.KeepAliveCadence{}, nil)
	res, err := ss.AcquireShards(context.Background(), shards)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != storage.Acquired {
			t.Fatalf("foreign acquire: %+v", r)
		}
	}
	return ss
}

// watchOnly sets cfg's timers that could take a shard without a watch
// event (the safety pass, the acquire retries) past the end of the test
// (harness.TimersAway): a move within harness.WatchBound was then woken by
// the watch. How fast the watch is, BenchmarkPlannedHandoff measures.
func watchOnly(cfg Config) Config {
	cfg.AcquireRetryInterval = harness.TimersAway
	cfg.RebalanceInterval = harness.TimersAway
	return cfg
}

// TestReacquireWokenByWatch: with no timer due within the test that could
// take a shard held elsewhere (watchOnly), each shard is acquired after its
// lock is deleted, within harness.WatchBound: only the lock watch can have
// woken the manager.
//
// The retry ticker is away too, retries off or not: a tick that found a
// polled shard's window exhausted would bring the safety pass forward, a
// pass every AcquireRetryInterval (200 ms by default) that would take the
// shard without the watch. (A shard the view shows held is not polled,
// so none should be; the test does not rely on it.)
func TestReacquireWokenByWatch(t *testing.T) {
	cfg := watchOnly(testConfig())
	cfg.AcquireRetryWindow = 0
	const n = 5
	c := newCluster(t, n, cfg)
	var all []storage.ShardID
	for i := range n {
		all = append(all, storage.ShardID{Group: "default", Index: i})
	}
	holder := foreignHolder(t, c, all)
	r := c.start("waiter", 1)
	testenv.WaitFor(t, "every shard pending", 10*time.Second, func() bool { return len(r.mgr.Status().Pending) == n })
	var gaps []time.Duration
	for _, s := range all {
		released := time.Now() // the release call is counted in the gap
		if err := holder.ReleaseShard(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "acquisition of "+s.String()+" (woken by the watch)", harness.WatchBound, func() bool {
			return slices.ContainsFunc(r.mgr.Owned(), func(o Ownership) bool { return o.Shard == s })
		})
		gaps = append(gaps, time.Since(released))
	}
	slices.Sort(gaps)
	t.Logf("release → acquired: %v (median %s)", gaps, gaps[len(gaps)/2])
	if v := testutil.ToFloat64(r.mgr.metrics.acquireRetries); v != 0 {
		t.Fatalf("acquire_retry_attempts_total = %v with retries disabled", v)
	}
}

// TestRetryWindowExhausted: a shard held elsewhere while the membership
// view shows its lock free (here the store hides every lock from the view,
// as a view that has not caught up with the holder would) is retried
// every interval for the window, then the exhaustion is counted; it is
// still taken when freed, by the rebalance the exhaustion brings forward.
func TestRetryWindowExhausted(t *testing.T) {
	cfg := testConfig()
	cfg.AcquireRetryInterval = 50 * time.Millisecond
	cfg.AcquireRetryWindow = 300 * time.Millisecond
	c := newCluster(t, 1, cfg)
	sh := storage.ShardID{Group: "default", Index: 0}
	holder := foreignHolder(t, c, []storage.ShardID{sh})
	r := c.startWith("retrier", 1, func(s storage.RunnerStore) storage.RunnerStore { return hiddenLocks{s} })
	testenv.WaitFor(t, "window exhaustion", 5*time.Second, func() bool {
		return testutil.ToFloat64(r.mgr.metrics.retryWindowExhausts) >= 1
	})
	if v := testutil.ToFloat64(r.mgr.metrics.acquireRetries); v < 3 {
		t.Fatalf("only %v retries in a 300ms window at 50ms", v)
	}
	if err := holder.ReleaseShard(context.Background(), sh); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "acquisition after release", 5*time.Second, func() bool { return len(r.mgr.Owned()) == 1 })
}

// TestHeldShardNotPolled: a shard whose lock the membership view shows
// held elsewhere is not retried, however short the retry window: the
// stream reports the lock's deletion, and the shard is taken then.
func TestHeldShardNotPolled(t *testing.T) {
	cfg := watchOnly(testConfig())
	cfg.AcquireRetryInterval = 20 * time.Millisecond
	cfg.AcquireRetryWindow = 100 * time.Millisecond
	c := newCluster(t, 1, cfg)
	sh := storage.ShardID{Group: "default", Index: 0}
	holder := foreignHolder(t, c, []storage.ShardID{sh})
	r := c.start("waiter", 1)
	testenv.WaitFor(t, "the shard pending", 10*time.Second, func() bool { return len(r.mgr.Status().Pending) == 1 })
	observe := time.NewTimer(3 * cfg.AcquireRetryWindow)
	<-observe.C // an observation period, not a synchronisation
	if v := testutil.ToFloat64(r.mgr.metrics.acquireRetries); v != 0 {
		t.Errorf("acquire_retry_attempts_total = %v for a shard the view shows held", v)
	}
	if v := testutil.ToFloat64(r.mgr.metrics.retryWindowExhausts); v != 0 {
		t.Errorf("acquire_retry_window_exhausted_total = %v for a shard the view shows held", v)
	}
	if err := holder.ReleaseShard(context.Background(), sh); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "acquisition after release (woken by the watch)", harness.WatchBound, func() bool { return len(r.mgr.Owned()) == 1 })
}

// hiddenLocks is a runner store whose membership listings and stream show
// the runners but no shard lock.
type hiddenLocks struct{ storage.RunnerStore }

func (h hiddenLocks) Membership(ctx context.Context) (storage.MembershipBatch, error) {
	b, err := h.RunnerStore.Membership(ctx)
	b.Events = withoutLocks(b.Events)
	return b, err
}

func (h hiddenLocks) WatchMembership(ctx context.Context) <-chan storage.MembershipBatch {
	in := h.RunnerStore.WatchMembership(ctx)
	out := make(chan storage.MembershipBatch)
	go func() {
		defer close(out)
		for b := range in {
			b.Events = withoutLocks(b.Events)
			select {
			case out <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func withoutLocks(evs []storage.MembershipEvent) []storage.MembershipEvent {
	return slices.DeleteFunc(slices.Clone(evs), func(ev storage.MembershipEvent) bool { return ev.Lock != nil })
}
