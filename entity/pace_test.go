package entity

import (
	"strings"
	"testing"
	"time"
)

// TestReconcilePace: the wait doubles after each listing that found
// nothing with no activity since, up to the maximum; activity or a fresh
// find brings it back to the base; the jitter only ever adds, up to a
// tenth.
func TestReconcilePace(t *testing.T) {
	p := newReconcilePace(time.Second, 4*time.Second)
	var asked []time.Duration
	p.jitter = func(d time.Duration) time.Duration { asked = append(asked, d); return 0 }
	want := func(step string, got, w time.Duration) {
		t.Helper()
		if got != w {
			t.Fatalf("%s: wait %s, want %s", step, got, w)
		}
	}
	want("first listing, even empty", p.listed(0), time.Second)
	want("empty", p.listed(0), 2*time.Second)
	want("empty", p.listed(0), 4*time.Second)
	want("empty at the max", p.listed(0), 4*time.Second)
	p.active()
	want("wait after activity", p.wait(), time.Second)
	want("listing after activity", p.listed(0), time.Second)
	want("empty again", p.listed(0), 2*time.Second)
	want("fresh find", p.listed(1), time.Second)
	want("empty after a fresh find", p.listed(0), 2*time.Second)
	if asked[0] != 100*time.Millisecond || asked[2] != 400*time.Millisecond {
		t.Fatalf("jitter asked for %v, want a tenth of each wait", asked)
	}
	// The real jitter: within [wait, 1.1 × wait).
	q := newReconcilePace(time.Second, time.Hour)
	for range 1000 {
		if w := q.wait(); w < time.Second || w >= 1100*time.Millisecond {
			t.Fatalf("jittered wait %s, want in [1s, 1.1s)", w)
		}
	}
}

// TestReconcileMaxIntervalValidated: the maximum may not be under the
// base interval, and the error names both keys.
func TestReconcileMaxIntervalValidated(t *testing.T) {
	c := DefaultConfig()
	if c.ReconcileMaxInterval != time.Hour {
		t.Fatalf("default ReconcileMaxInterval %s, want 1h", c.ReconcileMaxInterval)
	}
	c.ReconcileInterval = 2 * time.Hour
	err := c.Validate()
	if err == nil {
		t.Fatal("ReconcileMaxInterval under ReconcileInterval accepted")
	}
	for _, s := range []string{"entity.reconcile_max_interval", "entity.reconcile_interval"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	c.ReconcileMaxInterval = 2 * time.Hour
	if err := c.Validate(); err != nil {
		t.Fatalf("max = base refused: %v", err)
	}
}
