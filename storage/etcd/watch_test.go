package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// TestWatchMembershipAnnouncesBreak: a membership watch broken for good
// (cut off while the history it would resume from is compacted) says so at
// once with an empty batch marked Interrupted, at the revision of the
// batch before it, and only then resumes with a Resync listing. The
// sharding manager relies on the announcement to verify its locks itself
// while the stream is out of sync.
func TestWatchMembershipAnnouncesBreak(t *testing.T) {
	h := harness(t)
	ns := h.Namespace(t)
	w, s := h.Open(t, ns), h.Open(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Register(ctx, storage.RunnerInfo{ID: "first", Weight: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	ch := w.WatchMembership(ctx)
	var last storage.MembershipBatch
	select {
	case last = <-ch:
	case <-ctx.Done():
		t.Fatal("no initial listing")
	}
	if !last.Listing || last.Interrupted {
		t.Fatalf("first batch %+v, want a listing", last)
	}

	heal := h.Disconnect(t, w)
	// Two revisions, so that the one the watch would resume from is
	// compacted away.
	for _, id := range []string{"second", "third"} {
		if _, err := s.Register(ctx, storage.RunnerInfo{ID: id, Weight: 1}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	h.Compact(t)
	heal()

	interrupted := false
	for {
		var b storage.MembershipBatch
		select {
		case b = <-ch:
		case <-ctx.Done():
			t.Fatalf("no resync listing after the break (announced: %v)", interrupted)
		}
		switch {
		case b.Interrupted:
			if b.Listing || len(b.Events) != 0 || b.Revision != last.Revision {
				t.Fatalf("break announced as %+v, want an empty batch at revision %d", b, last.Revision)
			}
			interrupted = true
		case b.Resync:
			if !interrupted {
				t.Fatal("resync listing without the break announced first")
			}
			return
		}
		last = b
	}
}
