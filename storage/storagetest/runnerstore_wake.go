package storagetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv/poll"
	"github.com/tenurehq/tenure/storage"
)

// testWake: wake-ups reach the shard's watcher in order, only its shard's,
// and an interruption it cannot resume from is reported as a Resync.
func testWake(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	w, s := h.Open(t, ns), h.Open(t, ns)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	mine := storage.ShardID{Group: "default", Index: 3}
	other := storage.ShardID{Group: "default", Index: 4}
	ch, err := w.WatchWakes(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	// Established on return: wake-ups right after are delivered.
	for _, note := range []string{"a", "b", "c"} {
		if err := s.Wake(ctx, mine, note); err != nil {
			t.Fatal(err)
		}
		if err := s.Wake(ctx, other, "not-mine"); err != nil {
			t.Fatal(err)
		}
	}
	var prev int64
	for _, want := range []string{"a", "b", "c"} {
		ev := recv(t, ch, 5*time.Second, "wake-up")
		if ev.Note != want || ev.Shard != mine || ev.Resync || ev.Revision <= prev {
			t.Fatalf("wake-up %+v, want note %q after revision %d", ev, want, prev)
		}
		prev = ev.Revision
	}
	if err := s.Wake(ctx, storage.ShardID{Group: "bad/group", Index: 1}, "x"); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("Wake of an invalid shard: %v", err)
	}

	// Cut off while wake-ups happen and history is compacted: the watcher
	// learns it may have missed some.
	heal := h.Disconnect(t, w)
	if err := s.Wake(ctx, mine, "missed"); err != nil {
		t.Fatal(err)
	}
	h.Compact(t)
	heal()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("wake channel closed")
			}
			if ev.Resync || ev.Note == "missed" {
				goto resumed
			}
		case <-deadline:
			t.Fatal("neither the missed wake-up nor a resync arrived after reconnecting")
		}
	}
resumed:
	if err := s.Wake(ctx, mine, "after"); err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, ch, 10*time.Second, "wake-up after resuming", func(ev storage.WakeEvent) bool { return ev.Note == "after" })
	cancel()
	poll.For(t, "wake channel to close", 5*time.Second, func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	})
}
