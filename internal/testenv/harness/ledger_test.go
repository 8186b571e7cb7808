package harness

import (
	"strings"
	"testing"
	"time"
)

// TestLedgerFindsOverlaps: spans of one shard by two runners that overlap
// are reported, an open span counting as running until now; a runner's
// own successive spans and spans of different shards are not.
func TestLedgerFindsOverlaps(t *testing.T) {
	l := NewLedger()
	l.Acquired("a", shard(0), 1)
	l.Ended("a", shard(0), 1, "released")
	l.Acquired("b", shard(0), 2) // after a's end: a hand-over
	l.Acquired("a", shard(1), 3)
	l.Ended("a", shard(1), 3, "released")
	l.Acquired("a", shard(1), 4) // the same runner again
	if o := l.Overlaps(); len(o) != 0 {
		t.Fatalf("overlaps of a clean ledger: %v", o)
	}
	l.Acquired("c", shard(0), 5) // while b's span is open
	o := l.Overlaps()
	if len(o) != 1 || !strings.Contains(o[0], "shard "+shard(0).String()+" owned by b") {
		t.Fatalf("overlaps = %v, want b's and c's of shard 0", o)
	}
}

// TestLedgerHandovers: the gap from a span's end to the next span of the
// shard by another runner, for the spans of one runner ended for a reason.
func TestLedgerHandovers(t *testing.T) {
	l := NewLedger()
	since := time.Now()
	l.Acquired("d", shard(0), 1)
	l.Acquired("d", shard(1), 2)
	l.Acquired("d", shard(2), 3)
	l.Ended("d", shard(0), 1, "released")
	l.Ended("d", shard(1), 2, "released")
	l.Ended("d", shard(2), 3, "detached") // another reason: not counted
	l.Acquired("h", shard(0), 4)
	ended, gaps := l.Handovers("d", "released", since)
	if ended != 2 || len(gaps) != 1 || gaps[0] < 0 {
		t.Fatalf("Handovers = %d, %v; want 2 released, one taken over", ended, gaps)
	}
	if spans := l.AcquiredAfter(since); len(spans) != 4 || spans[3].Runner != "h" || !spans[3].End.IsZero() {
		t.Fatalf("AcquiredAfter = %+v", spans)
	}
}

// TestLedgerPanicsOnBrokenReports: an ownership reported twice without
// its end, and an end never acquired, are the layer's bugs: they panic.
func TestLedgerPanicsOnBrokenReports(t *testing.T) {
	for name, f := range map[string]func(*Ledger){
		"acquired twice": func(l *Ledger) { l.Acquired("a", shard(0), 1); l.Acquired("a", shard(0), 1) },
		"never acquired": func(l *Ledger) { l.Ended("a", shard(0), 1, "released") },
		"another epoch":  func(l *Ledger) { l.Acquired("a", shard(0), 1); l.Ended("a", shard(0), 2, "released") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f(NewLedger())
		}()
	}
}
