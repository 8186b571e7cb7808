package sharding

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// injectedMembership holds a runner's membership stream back while shut
// (gatedMembership) and delivers the batches a test injects meanwhile.
type injectedMembership struct {
	gatedMembership
	inject chan storage.MembershipBatch
}

func (m *injectedMembership) WatchMembership(ctx context.Context) <-chan storage.MembershipBatch {
	in := m.gatedMembership.WatchMembership(ctx)
	out := make(chan storage.MembershipBatch)
	go func() {
		defer close(out)
		for {
			var b storage.MembershipBatch
			select {
			case v, ok := <-in:
				if !ok {
					return
				}
				b = v
			case b = <-m.inject:
			case <-ctx.Done():
				return
			}
			select {
			case out <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func (m *injectedMembership) send(t *testing.T, b storage.MembershipBatch) {
	t.Helper()
	select {
	case m.inject <- b:
	case <-time.After(10 * time.Second):
		t.Fatal("the runner did not take an injected membership batch")
	}
}

// TestStrayLockReleased: the stream of a polled store (s3coord) can give
// a listing that misses a runner's own locks — written while the listing
// ran, or bound to a lease the listing judged lapsed just before its
// renewal landed — and then, at the next poll, the same locks again. The
// runner loses those shards at the listing (it cannot tell), while its
// lease still holds their locks. Here its stream shows the runner a
// newcomer in that listing, so the assignment then gives half the shards
// to the newcomer, which waits for their locks to be deleted. The runner
// must release those locks, though nothing of its runs on them any more:
// left alone they would be held for as long as its lease lives (CI's
// TestS3SwitchAwayFromEnforceThenCut once waited 30 s on one such lock).
// No safety pass runs meanwhile; the stream alone shows the stray locks.
func TestStrayLockReleased(t *testing.T) {
	testenv.CheckLeaks(t)
	cfg := testConfig()
	cfg.RebalanceInterval = time.Minute // no safety pass within the test: the stream alone must do
	c := newCluster(t, 16, cfg)
	inj := &injectedMembership{inject: make(chan storage.MembershipBatch)}
	a := c.startWith("a", 1, func(s storage.RunnerStore) storage.RunnerStore {
		inj.RunnerStore = s
		return inj
	})
	c.waitConverged(c.members(), 10*time.Second)
	inj.shut()
	defer inj.open()
	b := c.start("b", 1)
	testenv.WaitFor(t, "the newcomer waiting for the shards it is assigned", 10*time.Second, func() bool {
		return len(b.mgr.Status().Pending) > 0
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli := c.srv.Client(t)
	// bump spends a revision outside the membership prefixes, so that the
	// injected batches carry revisions of their own, above the runner's
	// view and below every later change.
	bump := func() int64 {
		resp, err := cli.Put(ctx, c.Prefix+"stray-test", "x")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	bump()
	listing, err := inj.RunnerStore.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	missed := storage.MembershipBatch{Revision: listing.Revision, Listing: true, Resync: true}
	var again []storage.MembershipEvent
	for _, ev := range listing.Events {
		if ev.Lock == nil {
			missed.Events = append(missed.Events, ev)
			continue
		}
		l := *ev.Lock
		if l.Lock.RunnerID != "a" {
			t.Fatalf("shard %s held by %q before the newcomer's view reached the runner", l.Shard, l.Lock.RunnerID)
		}
		again = append(again, storage.MembershipEvent{Lock: &l})
	}
	if len(again) != 16 {
		t.Fatalf("%d locks listed, want 16", len(again))
	}
	lostBefore := testutil.ToFloat64(a.mgr.metrics.locksLost)
	inj.send(t, missed)
	testenv.WaitFor(t, "the runner losing the locks the listing missed", 10*time.Second, func() bool {
		return testutil.ToFloat64(a.mgr.metrics.locksLost)-lostBefore == 16
	})
	rev := bump()
	for _, ev := range again {
		ev.Lock.Revision = rev
	}
	inj.send(t, storage.MembershipBatch{Revision: rev, Events: again})

	toB := ownedBy(c.waitConverged(c.members(), 10*time.Second), "b")
	// The newcomer's shards came from stray locks, and from shards the
	// runner had acquired again after the listing (its assignment then,
	// from a view with no lock held, differs a little from the one after)
	// and released as planned.
	released := testutil.ToFloat64(a.mgr.metrics.straysReleased)
	t.Logf("the newcomer owns %d shards; %v of them were stray locks of the runner's", toB, released)
	if released < 1 || released > float64(toB) {
		t.Fatalf("%v stray locks released, want between 1 and the newcomer's %d shards", released, toB)
	}
	c.ledger.checkNoOverlap(t)
}

// failFirstRelease is a runner store whose sessions fail the first
// release of each shard with ErrUnavailable, once armed.
type failFirstRelease struct {
	storage.RunnerStore
	mu     sync.Mutex
	armed  bool
	failed map[storage.ShardID]bool
}

func (f *failFirstRelease) arm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed, f.failed = true, map[storage.ShardID]bool{}
}

func (f *failFirstRelease) failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.failed)
}

func (f *failFirstRelease) Register(ctx context.Context, r storage.RunnerInfo, ttl time.Duration) (storage.Session, error) {
	ss, err := f.RunnerStore.Register(ctx, r, ttl)
	if err != nil {
		return nil, err
	}
	return &failFirstReleaseSession{Session: ss, f: f}, nil
}

type failFirstReleaseSession struct {
	storage.Session
	f *failFirstRelease
}

func (s *failFirstReleaseSession) ReleaseShard(ctx context.Context, sh storage.ShardID) error {
	s.f.mu.Lock()
	fail := s.f.armed && !s.f.failed[sh]
	if fail {
		s.f.failed[sh] = true
	}
	s.f.mu.Unlock()
	if fail {
		return errInjected
	}
	return s.Session.ReleaseShard(ctx, sh)
}

// TestFailedReleaseRetried: a planned release whose lock delete fails
// leaves the lock held by the runner's lease, with nothing running on it
// (Suspended). It is released for its assignee at the next acquire retry
// tick, the runner attached throughout (the retry's success answers the
// storage-error grace the failure started): before, only a re-attachment
// looked at it again, and the assignee waited for as long as the lease
// lived. No safety pass runs within the test.
func TestFailedReleaseRetried(t *testing.T) {
	testenv.CheckLeaks(t)
	cfg := testConfig()
	cfg.RebalanceInterval = time.Minute
	// Room on a busy machine for the retry's read to answer the failures'
	// storage-error grace; without the retry nothing answers it before
	// the pass a minute away, and the runner still detaches.
	cfg.Detachment.StorageErrorGrace = 3 * time.Second
	c := newCluster(t, 16, cfg)
	ff := &failFirstRelease{}
	a := c.startWith("a", 1, func(s storage.RunnerStore) storage.RunnerStore {
		ff.RunnerStore = s
		return ff
	})
	c.waitConverged(c.members(), 10*time.Second)
	ff.arm()
	c.start("b", 1)
	toB := ownedBy(c.waitConverged(c.members(), 15*time.Second), "b")
	released := testutil.ToFloat64(a.mgr.metrics.straysReleased)
	t.Logf("the newcomer owns %d shards; %d releases failed, %v locks released on a retry", toB, ff.failures(), released)
	if toB == 0 || ff.failures() != toB || released != float64(toB) {
		t.Fatalf("%d releases failed and %v released later, want both the newcomer's %d shards", ff.failures(), released, toB)
	}
	if a.mgr.Status().Attached != true {
		t.Fatal("the runner detached: the test proves nothing of a retry while attached")
	}
	if n := len(a.transitionsOf(detachment.Detached)); n != 0 {
		t.Fatalf("the runner detached %d times: a re-attachment, not the retry, may have released the locks", n)
	}
	c.ledger.checkNoOverlap(t)
}

// ownedBy counts the shards own gives to runner.
func ownedBy(own map[storage.ShardID]string, runner string) int {
	n := 0
	for _, r := range own {
		if r == runner {
			n++
		}
	}
	return n
}
