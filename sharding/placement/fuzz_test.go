package placement

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
)

// fuzzWeights are the weights a fuzz input picks from, valid and not.
var fuzzWeights = []float64{0, 1, 2, 3, 0.5, 1e-9, 1e9, math.NaN(), -1, math.Inf(1), 0.1, 7, 1e300, 1e-300, math.Inf(-1), 1}

// decodeRunners turns fuzz bytes into candidates, three bytes each: the id
// (from 16, so duplicates are common), the weight, and the groups as a bit
// set of a, b, c (none set: every group).
func decodeRunners(data []byte) []Candidate {
	var out []Candidate
	for len(data) >= 3 && len(out) < 16 {
		c := Candidate{ID: fmt.Sprintf("r%d", data[0]%16), Weight: fuzzWeights[data[1]%16]}
		for i, g := range []string{"a", "b", "c"} {
			if data[2]&(1<<i) != 0 {
				c.Groups = append(c.Groups, g)
			}
		}
		out = append(out, c)
		data = data[3:]
	}
	return out
}

// mergedView applies the documented merge rules independently of the
// implementation: one entry per id with its smallest weight (invalid counts
// as 0) and the intersection of its groups (an empty intersection drains).
func mergedView(runners []Candidate) []Candidate {
	type entry struct {
		w      float64
		all    bool
		groups map[string]bool
	}
	byID := map[string]*entry{}
	for _, r := range runners {
		w := r.Weight
		if !(w > 0) || math.IsInf(w, 0) {
			w = 0
		}
		e, ok := byID[r.ID]
		if !ok {
			e = &entry{w: w, all: true}
			byID[r.ID] = e
		}
		e.w = min(e.w, w)
		if len(r.Groups) == 0 {
			continue
		}
		set := map[string]bool{}
		for _, g := range r.Groups {
			if e.all || e.groups[g] {
				set[g] = true
			}
		}
		e.all, e.groups = false, set
	}
	var out []Candidate
	for id, e := range byID {
		c := Candidate{ID: id, Weight: e.w}
		if !e.all {
			c.Groups = slices.Sorted(maps.Keys(e.groups))
			if len(c.Groups) == 0 {
				c.Weight = 0
			}
		}
		out = append(out, c)
	}
	return out
}

// FuzzAssign checks the invariants on arbitrary memberships: the result
// equals the specification's literal walk, does not depend on input order,
// assigns every shard of a group to an eligible runner whenever one exists
// (and none otherwise), and keeps every runner within its balance bound.
func FuzzAssign(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 2, 0, 2, 3, 1}, uint16(64))
	f.Add([]byte{0, 1, 1, 0, 2, 6, 1, 0, 0, 2, 7, 4, 3, 12, 0}, uint16(255))
	f.Add([]byte{5, 9, 0, 6, 13, 0, 7, 5, 0, 8, 6, 0}, uint16(17))
	f.Add([]byte{1, 1, 0, 2, 1, 0, 3, 1, 0, 4, 1, 0, 5, 1, 0, 6, 1, 0, 7, 1, 0, 8, 1, 0}, uint16(7))
	f.Fuzz(func(t *testing.T, data []byte, shards uint16) {
		s := int(shards % 300)
		runners := decodeRunners(data)
		groups := []string{"a", "b", "c"}
		got := Assign(groups, s, runners)
		if want := referenceReassign(groups, s, runners, nil); !maps.Equal(got, want) {
			t.Fatalf("differs from the spec in %d shards", movedShards(got, want))
		}
		if v1, want := ProcedureV1.Assign(groups, s, runners), referenceAssignV1(groups, s, runners); !maps.Equal(v1, want) {
			t.Fatalf("v1 differs from its walk in %d shards", movedShards(v1, want))
		}
		reversed := slices.Clone(runners)
		slices.Reverse(reversed)
		if again := Assign([]string{"c", "b", "a", "b"}, s, reversed); !maps.Equal(got, again) {
			t.Fatalf("reordered input moved %d shards", movedShards(got, again))
		}
		if s > 0 {
			checkBalance(t, got, groups, s, mergedView(runners))
		} else if len(got) != 0 {
			t.Fatalf("%d shards assigned with shardsPerGroup 0", len(got))
		}
	})
}
