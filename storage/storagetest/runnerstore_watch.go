package storagetest

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv/poll"
	"github.com/tenurehq/tenure/storage"
)

// runnerEvents follows the runners in s's membership stream as runner
// events, the way a consumer of runners/ alone sees them: changes as they
// come, and for a listing the puts of new or changed runners and deletes
// for the ones it no longer holds (marked Resync like the listing). The
// channel closes when the stream does.
func runnerEvents(ctx context.Context, s storage.RunnerStore) <-chan storage.RunnerEvent {
	out := make(chan storage.RunnerEvent, 64)
	go func() {
		defer close(out)
		view := map[string]int64{} // id → revision
		for b := range s.WatchMembership(ctx) {
			var evs []storage.RunnerEvent
			seen := map[string]bool{}
			for _, ev := range b.Events {
				r := ev.Runner
				if r == nil || (b.Listing && r.Kind == storage.EventDelete) {
					continue
				}
				switch {
				case r.Kind == storage.EventDelete:
					delete(view, r.ID)
				case b.Listing && view[r.ID] == r.Revision:
					seen[r.ID] = true
					continue // unchanged
				default:
					seen[r.ID] = true
					view[r.ID] = r.Revision
				}
				evs = append(evs, *r)
			}
			if b.Listing {
				for _, id := range slices.Sorted(maps.Keys(view)) {
					if !seen[id] {
						delete(view, id)
						evs = append(evs, storage.RunnerEvent{Kind: storage.EventDelete, ID: id, Revision: b.Revision, Resync: b.Resync})
					}
				}
			}
			for _, ev := range evs {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// testWatchRunners: the membership stream carries every change of a
// runner's record — register, update, close — and ends with its context.
func testWatchRunners(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	w, s := h.Open(t, ns), h.Open(t, ns)
	register(t, s, "early", longTTL)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch := runnerEvents(ctx, w)
	ev := recv(t, ch, 5*time.Second, "initial put")
	if ev.Kind != storage.EventPut || ev.ID != "early" || ev.Runner.ID != "early" || ev.Revision <= 0 || ev.Resync {
		t.Fatalf("initial event %+v", ev)
	}
	late := register(t, s, "late", longTTL)
	ev = recv(t, ch, 5*time.Second, "put on register")
	if ev.Kind != storage.EventPut || ev.ID != "late" || ev.Runner.LeaseID != late.LeaseID() {
		t.Fatalf("register event %+v", ev)
	}
	r := runner("late")
	r.Weight = 0
	if err := late.UpdateRunner(ctx, r); err != nil {
		t.Fatal(err)
	}
	ev = recv(t, ch, 5*time.Second, "put on update")
	if ev.Kind != storage.EventPut || ev.Runner.Weight != 0 {
		t.Fatalf("update event %+v", ev)
	}
	if err := late.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ev = recv(t, ch, 5*time.Second, "delete on close")
	if ev.Kind != storage.EventDelete || ev.ID != "late" {
		t.Fatalf("close event %+v", ev)
	}
	cancel()
	poll.For(t, "watch channel to close when its context ends", 5*time.Second, func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	})
}

func testWatchShardLocks(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	w, s := h.Open(t, ns), h.Open(t, ns)
	ss := register(t, s, "locker", longTTL)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch := w.WatchShardLocks(ctx)
	sh := storage.ShardID{Group: "default", Index: 9}
	res, err := ss.AcquireShards(ctx, []storage.ShardID{sh})
	if err != nil {
		t.Fatal(err)
	}
	ev := recv(t, ch, 5*time.Second, "lock put")
	if ev.Kind != storage.EventPut || ev.Shard != sh || ev.Lock.Epoch != res[0].Epoch || ev.Lock.RunnerID != "locker" || ev.Lock.LeaseID != ss.LeaseID() {
		t.Fatalf("lock event %+v, want epoch %d", ev, res[0].Epoch)
	}
	if err := ss.ReleaseShard(ctx, sh); err != nil {
		t.Fatal(err)
	}
	ev = recv(t, ch, 5*time.Second, "lock delete")
	if ev.Kind != storage.EventDelete || ev.Shard != sh || ev.Revision <= res[0].Epoch {
		t.Fatalf("release event %+v", ev)
	}
}

// testWatchResume: a watcher cut off while runners come and go (and, with
// compact, while the history it would resume from is discarded) ends up with
// the right view once it reconnects, including the delete it missed.
func testWatchResume(t *testing.T, h RunnerStoreHarness, compact bool) {
	ns := h.Namespace(t)
	w, s := h.Open(t, ns), h.Open(t, ns)
	leaving := register(t, s, "leaving", longTTL)
	register(t, s, "staying", longTTL)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch := runnerEvents(ctx, w)
	view := map[string]bool{}
	resynced := false
	apply := func(ev storage.RunnerEvent) {
		if ev.Kind == storage.EventPut {
			view[ev.ID] = true
		} else {
			delete(view, ev.ID)
		}
		resynced = resynced || ev.Resync
	}
	for len(view) < 2 {
		apply(recv(t, ch, 5*time.Second, "initial listing"))
	}

	heal := h.Disconnect(t, w)
	if err := leaving.Close(ctx); err != nil {
		t.Fatal(err)
	}
	register(t, s, "joined", longTTL)
	if compact {
		h.Compact(t)
	}
	heal()

	want := []string{"joined", "staying"}
	deadline := time.After(30 * time.Second)
	for !slices.Equal(slices.Sorted(maps.Keys(view)), want) {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			apply(ev)
		case <-deadline:
			t.Fatalf("view after reconnect %v, want %v", slices.Sorted(maps.Keys(view)), want)
		}
	}
	if compact && !resynced {
		t.Fatal("history was compacted, yet the view was rebuilt without a re-list (no Resync events)")
	}
}
