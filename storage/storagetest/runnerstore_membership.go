package storagetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// describe renders a membership event as "runner put a", "lock delete
// default/1".
func describe(ev storage.MembershipEvent) string {
	switch {
	case ev.Runner != nil:
		return fmt.Sprintf("runner %s %s", ev.Runner.Kind, ev.Runner.ID)
	case ev.Lock != nil:
		return fmt.Sprintf("lock %s %s", ev.Lock.Kind, ev.Lock.Shard)
	}
	return "neither runner nor lock"
}

func describeAll(b storage.MembershipBatch) []string {
	var out []string
	for _, ev := range b.Events {
		out = append(out, describe(ev))
	}
	return out
}

// memberView is a consumer's view of the membership stream: it replaces
// itself with every listing and applies every other batch.
type memberView struct {
	rev     int64
	runners map[string]storage.RunnerInfo
	locks   map[storage.ShardID]string // shard → holder
	resyncs int
}

func newMemberView() *memberView {
	return &memberView{runners: map[string]storage.RunnerInfo{}, locks: map[storage.ShardID]string{}}
}

func (v *memberView) apply(t *testing.T, b storage.MembershipBatch) {
	t.Helper()
	if b.Revision < v.rev {
		t.Fatalf("batch at revision %d after one at %d", b.Revision, v.rev)
	}
	v.rev = b.Revision
	if b.Resync {
		v.resyncs++
	}
	if b.Listing {
		clear(v.runners)
		clear(v.locks)
	}
	for _, ev := range b.Events {
		switch {
		case ev.Runner != nil && ev.Runner.Kind == storage.EventPut:
			v.runners[ev.Runner.ID] = ev.Runner.Runner
		case ev.Runner != nil:
			delete(v.runners, ev.Runner.ID)
		case ev.Lock != nil && ev.Lock.Kind == storage.EventPut:
			v.locks[ev.Lock.Shard] = ev.Lock.Lock.RunnerID
		case ev.Lock != nil:
			delete(v.locks, ev.Lock.Shard)
		}
	}
}

// testWatchMembership: runners/ and shards/ arrive as one stream of batches
// in revision order, starting with a listing of both; a lease revoke's
// runner delete and lock deletes arrive in one batch; the cluster's other
// keys (and keys that merely sort between the two prefixes) never appear.
func testWatchMembership(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	w, s := h.Open(t, ns), h.Open(t, ns)
	a := register(t, s, "a", longTTL)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	s1, s2, s3 := storage.ShardID{Group: "default", Index: 1}, storage.ShardID{Group: "default", Index: 2}, storage.ShardID{Group: "default", Index: 3}
	if _, err := a.AcquireShards(ctx, []storage.ShardID{s1}); err != nil {
		t.Fatal(err)
	}
	ch := w.WatchMembership(ctx)
	first := recv(t, ch, 5*time.Second, "initial listing")
	if !first.Listing || first.Resync || first.Revision <= 0 {
		t.Fatalf("first batch: listing=%v resync=%v revision=%d; want a listing at a real revision", first.Listing, first.Resync, first.Revision)
	}
	if got, want := slices.Sorted(slices.Values(describeAll(first))), []string{"lock put default/1", "runner put a"}; !slices.Equal(got, want) {
		t.Fatalf("initial listing %v, want %v", got, want)
	}

	// Interleaved changes of both prefixes, and of keys outside them. A
	// backend whose watch coalesces (it polls) sees each step before the
	// next is made, so that every change is one it can show; otherwise
	// they are made back to back.
	var got []string
	var revs []int64
	var closing storage.MembershipBatch
	last := first.Revision
	// collect reads batches until got holds n events.
	collect := func(n int) {
		t.Helper()
		for len(got) < n {
			bt := recv(t, ch, 5*time.Second, fmt.Sprintf("batch after %d events", len(got)))
			if bt.Listing || bt.Resync || len(bt.Events) == 0 {
				t.Fatalf("batch %+v: want watch events only", bt)
			}
			if bt.Revision <= last {
				t.Fatalf("batch revision %d after %d", bt.Revision, last)
			}
			last = bt.Revision
			for _, ev := range bt.Events {
				if ev.Runner == nil && ev.Lock == nil {
					t.Fatalf("event outside runners/ and shards/: %+v", ev)
				}
				if ev.Revision() > bt.Revision {
					t.Fatalf("event at revision %d in a batch at %d", ev.Revision(), bt.Revision)
				}
				got = append(got, describe(ev))
				revs = append(revs, ev.Revision())
				if describe(ev) == "runner delete b" {
					closing = bt
				}
			}
		}
	}
	seen := 0
	step := func(events int) {
		t.Helper()
		seen += events
		if h.WatchCoalesces {
			collect(seen)
		}
	}
	h.PutRaw(t, ns, "wake/default/1", []byte("ptr"))
	h.PutRaw(t, ns, "runnersX", []byte("not a runner"))
	b := register(t, s, "b", longTTL)
	step(1)
	if _, err := b.AcquireShards(ctx, []storage.ShardID{s2, s3}); err != nil {
		t.Fatal(err)
	}
	step(2)
	if err := a.ReleaseShard(ctx, s1); err != nil {
		t.Fatal(err)
	}
	step(1)
	h.PutRaw(t, ns, "config", []byte(`{}`))
	rb := runner("b")
	rb.Weight = 0
	if err := b.UpdateRunner(ctx, rb); err != nil {
		t.Fatal(err)
	}
	step(1)
	if err := b.Close(ctx); err != nil { // its record and its locks go in one revision
		t.Fatal(err)
	}
	want := []string{"runner put b", "lock put default/2", "lock put default/3", "lock delete default/1", "runner put b"}
	collect(len(want) + 3)
	cmp := slices.Clone(got[:len(want)])
	if h.WatchCoalesces {
		// One AcquireShards call is one transaction on etcd; where each
		// shard is a write of its own, a poll may fall between them, so
		// the step's lock puts are compared in any order.
		slices.Sort(cmp[1:3])
	}
	if !slices.Equal(cmp, want) {
		t.Fatalf("events %v, want %v then the close", got, want)
	}
	if !slices.IsSorted(revs) {
		t.Fatalf("revisions out of order: %v (%v)", revs, got)
	}
	// The revoke's three deletes share a revision, so they come in one
	// batch: a consumer never sees b gone with its locks still held.
	inBatch := describeAll(closing)
	for _, d := range []string{"runner delete b", "lock delete default/2", "lock delete default/3"} {
		if !slices.Contains(inBatch, d) {
			t.Fatalf("the close came as %v; the batch with b's delete holds %v", got[len(want):], inBatch)
		}
	}
	select {
	case bt := <-ch:
		t.Fatalf("unexpected batch %v", describeAll(bt))
	case <-time.After(200 * time.Millisecond):
	}
}

// testMembershipListing: Membership reads both prefixes at one revision,
// as a listing; undecodable records are events carrying Err, reported as
// ErrCorrupt, and keys between the prefixes are left out.
func testMembershipListing(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	s := h.Open(t, ns)
	a := register(t, s, "a", longTTL)
	ctx := ctxT(t)
	if _, err := a.AcquireShards(ctx, shards("default", 0, 2)); err != nil {
		t.Fatal(err)
	}
	l, err := s.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, locksRev, err := s.ShardLocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Listing || l.Revision <= 0 || l.Revision > locksRev {
		t.Fatalf("listing=%v at revision %d (a later read is at %d)", l.Listing, l.Revision, locksRev)
	}
	if got, want := slices.Sorted(slices.Values(describeAll(l))), []string{"lock put default/0", "lock put default/1", "runner put a"}; !slices.Equal(got, want) {
		t.Fatalf("listing %v, want %v", got, want)
	}
	h.PutRaw(t, ns, "runners/bad", []byte(`{"id": 12`))
	h.PutRaw(t, ns, "runnersX", []byte("between the prefixes"))
	l, err = s.Membership(ctx)
	if !errors.Is(err, storage.ErrCorrupt) {
		t.Fatalf("listing with a corrupt record: err %v, want ErrCorrupt", err)
	}
	bad := 0
	for _, ev := range l.Events {
		if ev.Runner != nil && ev.Runner.ID == "bad" {
			if ev.Runner.Err == nil {
				t.Fatalf("corrupt record listed without its error: %+v", ev.Runner)
			}
			bad++
		}
	}
	if bad != 1 || len(l.Events) != 4 {
		t.Fatalf("listing %v: want the three records and the corrupt one", describeAll(l))
	}
}

// testWatchMembershipResume: a watcher cut off while runners and locks
// change, and the history compacted, rebuilds a view of both that matches
// the store, through a listing marked Resync.
func testWatchMembershipResume(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	w, s := h.Open(t, ns), h.Open(t, ns)
	leaving := register(t, s, "leaving", longTTL)
	staying := register(t, s, "staying", longTTL)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	if _, err := leaving.AcquireShards(ctx, shards("default", 0, 2)); err != nil {
		t.Fatal(err)
	}
	ch := w.WatchMembership(ctx)
	v := newMemberView()
	for len(v.runners) < 2 || len(v.locks) < 2 {
		v.apply(t, recv(t, ch, 5*time.Second, "initial listing"))
	}

	heal := h.Disconnect(t, w)
	if err := leaving.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := staying.AcquireShards(ctx, shards("default", 1, 2)); err != nil {
		t.Fatal(err)
	}
	register(t, s, "joined", longTTL)
	h.Compact(t)
	heal()

	wantRunners := []string{"joined", "staying"}
	wantLocks := map[storage.ShardID]string{{Group: "default", Index: 1}: "staying", {Group: "default", Index: 2}: "staying"}
	deadline := time.After(30 * time.Second)
	for !slices.Equal(slices.Sorted(maps.Keys(v.runners)), wantRunners) || !maps.Equal(v.locks, wantLocks) {
		select {
		case b, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			v.apply(t, b)
		case <-deadline:
			t.Fatalf("view after reconnect: runners %v locks %v; want %v %v", slices.Sorted(maps.Keys(v.runners)), v.locks, wantRunners, wantLocks)
		}
	}
	if v.resyncs == 0 {
		t.Fatal("history was compacted, yet the view was rebuilt without a re-list (no Resync listing)")
	}
}
