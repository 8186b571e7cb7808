package placement

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tenurehq/tenure/storage"
)

// TestAssignDeterministic: the same membership in any order (runners,
// groups, a runner's groups, repeated group names) gives the same map.
func TestAssignDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 50 {
		runners := randomRunners(rng, 2+rng.IntN(30), i%2 == 0)
		for j := range runners {
			if rng.IntN(3) == 0 {
				runners[j].Groups = []string{"jobs", "mail", "default"}[:1+rng.IntN(3)]
			}
		}
		groups := []string{"default", "jobs", "mail"}
		want := Assign(groups, 128, runners)
		for range 5 {
			rs := shuffledCopy(rng, runners)
			for j := range rs {
				rs[j].Groups = shuffledCopy(rng, rs[j].Groups)
			}
			gs := append(shuffledCopy(rng, groups), groups[rng.IntN(3)])
			if got := Assign(gs, 128, rs); !maps.Equal(got, want) {
				t.Fatalf("case %d: shuffled input moved %d shards", i, movedShards(got, want))
			}
		}
	}
}

// TestBalance: for 256 and 1024 shards over 2–50 runners, equal and mixed
// (1, 2, 3) weights, and for log-normally skewed weights, every runner is
// within max(10% of its weighted ideal, 1 shard) of it.
func TestBalance(t *testing.T) {
	for _, shards := range []int{256, 1024} {
		for _, mixed := range []bool{false, true} {
			for n := 2; n <= 50; n++ {
				for seed := range uint64(4) {
					rng := rand.New(rand.NewPCG(seed, uint64(n)))
					runners := randomRunners(rng, n, mixed)
					a := Assign([]string{"default"}, shards, runners)
					checkBalance(t, a, []string{"default"}, shards, runners)
				}
			}
		}
	}
	// Skewed weights: bands of a few shards next to bands of hundreds.
	rng := rand.New(rand.NewPCG(7, 8))
	for range 50 {
		runners := randomRunners(rng, 2+rng.IntN(20), false)
		for j := range runners {
			runners[j].Weight = math.Exp(rng.NormFloat64() * 2)
		}
		a := Assign([]string{"default"}, 512, runners)
		checkBalance(t, a, []string{"default"}, 512, runners)
	}
}

// TestGroups: a runner owns only shards of the groups it serves, weights are
// shared only among the runners eligible for a group, and a group nobody
// serves is absent.
func TestGroups(t *testing.T) {
	runners := []Candidate{
		{ID: "a", Weight: 1, Groups: []string{"x"}},
		{ID: "b", Weight: 1, Groups: []string{"y"}},
		{ID: "c", Weight: 2},                                  // every group
		{ID: "d", Weight: 0, Groups: []string{"x", "y", "z"}}, // drained
		{ID: "e", Weight: 3, Groups: []string{"x", "nobody-asked"}},
	}
	groups := []string{"x", "y", "z", "w"}
	a := Assign(groups, 60, runners)
	serves := map[string][]string{"a": {"x"}, "b": {"y"}, "c": groups, "e": {"x"}}
	for s, owner := range a {
		if !slices.Contains(serves[owner], s.Group) {
			t.Fatalf("%s owned by %s, which serves %v", s, owner, serves[owner])
		}
	}
	checkBalance(t, a, groups, 60, runners)
	if c := a.Counts(); c["d"] != 0 {
		t.Fatalf("drained runner d owns %d shards", c["d"])
	}
	// z and w are served by c alone.
	for _, g := range []string{"z", "w"} {
		for k := range 60 {
			if o := a[storage.ShardID{Group: g, Index: k}]; o != "c" {
				t.Fatalf("%s/%d owned by %q, want c (its only server)", g, k, o)
			}
		}
	}

	// A group that no runner serves is absent; the others are unaffected.
	only := []Candidate{{ID: "a", Weight: 1, Groups: []string{"x"}}}
	b := Assign([]string{"x", "y"}, 10, only)
	if len(b) != 10 || len(b.ShardsOf("a")) != 10 {
		t.Fatalf("got %d shards (%d owned by a), want the 10 of group x", len(b), len(b.ShardsOf("a")))
	}
	for s := range b {
		if s.Group != "x" {
			t.Fatalf("shard %s of a group nobody serves is assigned", s)
		}
	}

	// Each group is assigned independently: dropping a group changes
	// nothing in the others.
	got := Assign([]string{"x", "y", "z"}, 60, runners)
	maps.DeleteFunc(a, func(s storage.ShardID, _ string) bool { return s.Group == "w" })
	if !maps.Equal(got, a) {
		t.Fatalf("dropping group w moved %d shards of the other groups", movedShards(got, a))
	}
}

// TestEdgeCases covers degenerate inputs, each with its documented result.
func TestEdgeCases(t *testing.T) {
	one := []Candidate{{ID: "solo", Weight: 1}}
	cases := []struct {
		name    string
		groups  []string
		shards  int
		runners []Candidate
		want    map[string]int // shard counts
	}{
		{"no runners", []string{"default"}, 16, nil, map[string]int{}},
		{"only drained runners", []string{"default"}, 16, []Candidate{{ID: "a"}, {ID: "b", Weight: -1}}, map[string]int{}},
		{"zero shards", []string{"default"}, 0, one, map[string]int{}},
		{"negative shards", []string{"default"}, -5, one, map[string]int{}},
		{"no groups", nil, 16, one, map[string]int{}},
		{"one runner", []string{"default", "jobs"}, 16, one, map[string]int{"solo": 32}},
		{"more runners than shards", []string{"default"}, 3, randomRunners(rand.New(rand.NewPCG(1, 1)), 10, false), nil},
		{"empty id ignored", []string{"default"}, 8, []Candidate{{ID: "", Weight: 5}, {ID: "solo", Weight: 1}}, map[string]int{"solo": 8}},
		{"repeated group", []string{"default", "default"}, 8, one, map[string]int{"solo": 8}},
		{"NaN, Inf and negative weights drain", []string{"default"}, 8, []Candidate{
			{ID: "nan", Weight: math.NaN()}, {ID: "inf", Weight: math.Inf(1)}, {ID: "ninf", Weight: math.Inf(-1)},
			{ID: "neg", Weight: -3}, {ID: "solo", Weight: 0.25},
		}, map[string]int{"solo": 8}},
		{"weight ratio underflows to 0", []string{"default"}, 8, []Candidate{
			{ID: "huge", Weight: 1e300}, {ID: "tiny", Weight: 1e-300},
		}, map[string]int{"huge": 8}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Assign(c.groups, c.shards, c.runners)
			if c.want != nil && !maps.Equal(a.Counts(), c.want) {
				t.Fatalf("counts = %v, want %v", a.Counts(), c.want)
			}
			if c.shards > 0 {
				checkBalance(t, a, slices.Compact(slices.Clone(c.groups)), c.shards, c.runners)
			}
		})
	}
}

// TestDuplicateIDs: entries sharing an id are merged conservatively, the
// smallest weight and the intersection of groups, whatever their order.
func TestDuplicateIDs(t *testing.T) {
	others := []Candidate{{ID: "o1", Weight: 1}, {ID: "o2", Weight: 2}}
	groups := []string{"x", "y", "z"}
	cases := []struct {
		name   string
		dups   []Candidate
		merged Candidate
	}{
		{"smallest weight, common groups",
			[]Candidate{{ID: "a", Weight: 2, Groups: []string{"x", "y"}}, {ID: "a", Weight: 1, Groups: []string{"y", "z"}}},
			Candidate{ID: "a", Weight: 1, Groups: []string{"y"}}},
		{"all groups meets some",
			[]Candidate{{ID: "a", Weight: 1}, {ID: "a", Weight: 1, Groups: []string{"x"}}},
			Candidate{ID: "a", Weight: 1, Groups: []string{"x"}}},
		{"a drained entry drains",
			[]Candidate{{ID: "a", Weight: 3}, {ID: "a", Weight: 0}},
			Candidate{ID: "a", Weight: 0}},
		{"invalid weight drains",
			[]Candidate{{ID: "a", Weight: 3}, {ID: "a", Weight: math.NaN()}, {ID: "a", Weight: 3}},
			Candidate{ID: "a", Weight: 0}},
		{"disjoint groups serve nothing",
			[]Candidate{{ID: "a", Weight: 1, Groups: []string{"x"}}, {ID: "a", Weight: 1, Groups: []string{"y"}}},
			Candidate{ID: "a", Weight: 0}},
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := Assign(groups, 64, append(slices.Clone(others), c.merged))
			for range 10 {
				in := shuffledCopy(rng, append(slices.Clone(others), c.dups...))
				if got := Assign(groups, 64, in); !maps.Equal(got, want) {
					t.Fatalf("duplicates %v in order %v: %d shards differ from the merged entry %v", c.dups, in, movedShards(got, want), c.merged)
				}
			}
		})
	}
}

// TestShardsOfAndCounts checks the helpers on a multi-group assignment.
func TestShardsOfAndCounts(t *testing.T) {
	runners := randomRunners(rand.New(rand.NewPCG(11, 12)), 7, true)
	groups := []string{"jobs", "default", "mail"}
	a := Assign(groups, 50, runners)
	counts := a.Counts()
	total := 0
	for _, r := range runners {
		shards := a.ShardsOf(r.ID)
		if len(shards) != counts[r.ID] {
			t.Fatalf("ShardsOf(%s) has %d shards, Counts says %d", r.ID, len(shards), counts[r.ID])
		}
		if !slices.IsSortedFunc(shards, func(x, y storage.ShardID) int {
			if x.Less(y) {
				return -1
			}
			if y.Less(x) {
				return 1
			}
			return 0
		}) {
			t.Fatalf("ShardsOf(%s) not sorted by ShardID.Less: %v", r.ID, shards)
		}
		for _, s := range shards {
			if a[s] != r.ID {
				t.Fatalf("ShardsOf(%s) lists %s, owned by %s", r.ID, s, a[s])
			}
		}
		total += len(shards)
	}
	if total != len(a) || len(a) != 150 {
		t.Fatalf("ShardsOf covers %d shards of %d, want 150", total, len(a))
	}
	if got := a.ShardsOf("nobody"); len(got) != 0 {
		t.Fatalf("ShardsOf(unknown) = %v, want none", got)
	}
	if got := CandidateOf(storage.RunnerInfo{ID: "r", Weight: 2, Groups: []string{"x"}}); got.ID != "r" || got.Weight != 2 || !slices.Equal(got.Groups, []string{"x"}) {
		t.Fatalf("CandidateOf = %+v", got)
	}
}
