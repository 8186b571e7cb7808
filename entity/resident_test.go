package entity

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestResidentsIdleExact: with promotion on use at most every
// promoteEvery, the LRU's order lags the uses, and idle still finds
// exactly the instances unused since the cut-off: not one used since but
// not moved, and every one unused however it was listed.
func TestResidentsIdleExact(t *testing.T) {
	var r residents
	r.init()
	h := &Host{}
	h.cfg.MaxResident = 100
	h.metrics = newMetrics(prometheus.NewRegistry())
	names := []string{"a", "b", "c", "d"}
	ins := map[string]*instance{}
	for _, n := range names {
		ins[n] = &instance{typ: "t", id: n}
		r.add(h, ins[n]) // listed in this order: d at the front
	}
	cut := time.Now()
	// b is used after the cut-off, too soon after its listing to move.
	r.touch(ins["b"])
	if ins["b"].listed.Load() > mono(cut) {
		t.Fatal("b moved on a use within promoteEvery of its listing")
	}
	idle := func(before time.Time) []string {
		var out []string
		for _, in := range r.idle(before) {
			out = append(out, in.id)
		}
		slices.Sort(out)
		return out
	}
	if got := idle(cut); !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Fatalf("idle since the cut-off: %v, want a c d (b was used after it)", got)
	}
	// The walk moved b to the front: the list is in listed order again.
	if front := r.lru.Front().Value.(*instance); front != ins["b"] {
		t.Fatalf("front is %s, want b", front.id)
	}
	// A use promoteEvery after the listing moves the instance.
	ins["a"].listed.Store(monoNow() - int64(promoteEvery))
	r.touch(ins["a"])
	if front := r.lru.Front().Value.(*instance); front != ins["a"] {
		t.Fatalf("front is %s, want a (used promoteEvery after its listing)", front.id)
	}
	if got := idle(time.Now()); len(got) != 4 {
		t.Fatalf("idle since now: %v, want all four", got)
	}
}
