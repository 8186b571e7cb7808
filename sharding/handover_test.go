package sharding

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/storage"
)

// TestDrainHandsOver: a draining runner hands each shard over (handler
// asked to requeue while the lock is still held), and successors pick each
// up woken by the lock watch (no timer that could is due: watchOnly).
func TestDrainHandsOver(t *testing.T) {
	testenv.CheckLeaks(t)
	c := newCluster(t, 32, watchOnly(testConfig()))
	smp := c.sample()
	d := c.start("drainer", 1)
	c.start("heir-1", 1)
	c.start("heir-2", 1)
	c.waitConverged(c.members(), 15*time.Second)
	n := len(d.mgr.Owned())
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.mgr.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	drained := time.Since(start)
	testenv.WaitFor(t, "heirs to own every shard", 10*time.Second, func() bool {
		own, ok := c.ownership([]*testRunner{c.runner("heir-1"), c.runner("heir-2")})
		return ok && len(own) == 32
	})
	checkHandOverGaps(t, c, d, start, n, drained)
	smp.finish(t)
	c.ledger.checkNoOverlap(t)
}

// checkHandOverGaps measures, for every shard the drained runner d released
// since start, the gap from its release to the successor's acquisition,
// and wants none over harness.WatchBound.
func checkHandOverGaps(t *testing.T, c *cluster, d *testRunner, start time.Time, owned int, drained time.Duration) {
	t.Helper()
	// A successor's manager counts a shard owned a moment before its
	// handler hears of it, which is when the ledger's span starts: wait
	// for the spans (their times are the ones recorded, whenever read).
	var released int
	var gaps []time.Duration
	_ = harness.Await(context.Background(), 10*time.Second, 10*time.Millisecond, func() (bool, string, error) {
		released, gaps = c.ledger.Handovers(d.id, string(LossReleased), start)
		return released > 0 && len(gaps) == released, "", nil
	})
	if released == 0 || len(gaps) != released || len(d.mgr.Owned()) != 0 {
		t.Fatalf("%d hand-overs recorded for %d releases (%d owned before, %d after)", len(gaps), released, owned, len(d.mgr.Owned()))
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	t.Logf("drained %d shards in %s; hand-over gap median %s, max %s", owned, drained, gaps[len(gaps)/2], gaps[len(gaps)-1])
	// The gap runs from the handler's handoff (before the lock is deleted)
	// to the successor's acquisition, woken by the lock watch.
	if gaps[len(gaps)-1] > harness.WatchBound {
		t.Errorf("a shard took %s to be picked up after its release, want within %s (woken by the lock watch)", gaps[len(gaps)-1], harness.WatchBound)
	}
}

// gatedMembership holds back the membership stream while shut, as a
// stream that trails the cluster does; it delivers every batch, in order,
// when opened.
type gatedMembership struct {
	storage.RunnerStore
	mu   sync.Mutex
	gate chan struct{} // non-nil while shut; closed on opening
}

func (g *gatedMembership) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate == nil {
		g.gate = make(chan struct{})
	}
}

func (g *gatedMembership) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

func (g *gatedMembership) WatchMembership(ctx context.Context) <-chan storage.MembershipBatch {
	in := g.RunnerStore.WatchMembership(ctx)
	out := make(chan storage.MembershipBatch)
	go func() {
		defer close(out)
		for b := range in {
			g.mu.Lock()
			gate := g.gate
			g.mu.Unlock()
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
				}
			}
			select {
			case out <- b:
			case <-ctx.Done():
			}
		}
	}()
	return out
}

// TestHandOverAfterViewLag: the successor's membership stream is held back
// while a runner drains; the drain, its weight 0 and every release arrive
// at once when the stream resumes, and the successor takes every shard
// straight away, without a shard going anywhere else.
func TestHandOverAfterViewLag(t *testing.T) {
	testenv.CheckLeaks(t)
	cfg := testConfig()
	cfg.RebalanceInterval = 30 * time.Second
	c := newCluster(t, 16, cfg)
	d := c.start("drainer", 1)
	gate := &gatedMembership{}
	heir := c.startWith("heir", 1, func(s storage.RunnerStore) storage.RunnerStore {
		gate.RunnerStore = s
		return gate
	})
	c.waitConverged(c.members(), 15*time.Second)
	gate.shut()
	defer gate.open()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.mgr.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(heir.mgr.Owned()); n == 16 {
		t.Fatal("the heir owns every shard while its view is held back")
	}
	opened := time.Now()
	gate.open()
	testenv.WaitFor(t, "the heir to own every shard", 5*time.Second, func() bool { return len(heir.mgr.Owned()) == 16 })
	took := time.Since(opened)
	t.Logf("the heir owned every shard %s after its view caught up", took)
	for _, sp := range c.ledger.AcquiredAfter(opened) {
		if sp.Runner != "heir" {
			t.Errorf("%s acquired %s after the drain", sp.Runner, sp.Shard)
		}
	}
	c.ledger.checkNoOverlap(t)
}

// overlapStore counts the ReleaseShard calls in flight at once on its
// sessions, once armed for total releases. Each call waits, before
// deleting the lock, until want calls are in flight, or every release
// left is, unless a wait has already given up after patient: releases
// made one at a time then wait once and the test fails on the count.
type overlapStore struct {
	storage.RunnerStore
	want, total int
	patient     time.Duration

	mu     sync.Mutex
	cond   *sync.Cond
	armed  bool
	now    int // in flight
	done   int // returned
	most   int // the most in flight at once
	gaveUp bool
}

func newOverlapStore(want int, patient time.Duration) *overlapStore {
	o := &overlapStore{want: want, patient: patient}
	o.cond = sync.NewCond(&o.mu)
	return o
}

// arm starts counting (and holding) the next total releases.
func (o *overlapStore) arm(total int) {
	o.mu.Lock()
	o.armed, o.total = true, total
	o.mu.Unlock()
}

func (o *overlapStore) Register(ctx context.Context, self storage.RunnerInfo, ttl time.Duration) (storage.Session, error) {
	ss, err := o.RunnerStore.Register(ctx, self, ttl)
	if err != nil {
		return nil, err
	}
	return &overlapSession{Session: ss, o: o}, nil
}

type overlapSession struct {
	storage.Session
	o *overlapStore
}

func (s *overlapSession) ReleaseShard(ctx context.Context, shard storage.ShardID) error {
	o := s.o
	o.mu.Lock()
	if !o.armed {
		o.mu.Unlock()
		return s.Session.ReleaseShard(ctx, shard)
	}
	o.now++
	o.most = max(o.most, o.now)
	o.cond.Broadcast()
	wake := time.AfterFunc(o.patient, func() {
		o.mu.Lock()
		o.gaveUp = true
		o.cond.Broadcast()
		o.mu.Unlock()
	})
	for o.now < min(o.want, o.total-o.done) && !o.gaveUp {
		o.cond.Wait()
	}
	wake.Stop()
	o.mu.Unlock()
	err := s.Session.ReleaseShard(ctx, shard)
	o.mu.Lock()
	o.now--
	o.done++
	o.cond.Broadcast()
	o.mu.Unlock()
	return err
}

// TestDrainReleasesInParallel: a drain deletes up to releaseParallel locks
// at once, each after its handler's handoff, instead of one after the
// other (a drain of 410 shards took 5.4 s one at a time on two busy
// cores); the successor gets every shard, each picked up on the lock
// watch, and no shard is run by two runners at once.
func TestDrainReleasesInParallel(t *testing.T) {
	testenv.CheckLeaks(t)
	c := newCluster(t, 4*releaseParallel, watchOnly(testConfig()))
	smp := c.sample()
	ov := newOverlapStore(releaseParallel, 5*time.Second)
	d := c.startWith("drainer", 1, func(s storage.RunnerStore) storage.RunnerStore {
		ov.RunnerStore = s
		return ov
	})
	c.start("heir", 1)
	c.waitConverged(c.members(), 15*time.Second)
	n := len(d.mgr.Owned())
	if n < releaseParallel {
		t.Fatalf("the drainer owns %d shards, want at least %d to release", n, releaseParallel)
	}
	ov.arm(n)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.mgr.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	drained := time.Since(start)
	testenv.WaitFor(t, "the heir to own every shard", 10*time.Second, func() bool {
		own, ok := c.ownership([]*testRunner{c.runner("heir")})
		return ok && len(own) == 4*releaseParallel
	})
	checkHandOverGaps(t, c, d, start, n, drained)
	ov.mu.Lock()
	most, gaveUp, done := ov.most, ov.gaveUp, ov.done
	ov.mu.Unlock()
	if most != releaseParallel || gaveUp || done != n {
		t.Errorf("%d of %d locks deleted, at most %d at once (a wait gave up: %v), want %d at once", done, n, most, gaveUp, releaseParallel)
	}
	smp.finish(t)
	c.ledger.checkNoOverlap(t)
}
