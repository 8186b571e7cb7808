package placement

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/storage"
)

// ---- helpers ----

// randomRunners returns n runners with random ids; mixed weights cycle
// through 1, 2, 3.
func randomRunners(rng *rand.Rand, n int, mixed bool) []Candidate {
	out := make([]Candidate, n)
	for i := range out {
		w := 1.0
		if mixed {
			w = float64(1 + i%3)
		}
		out[i] = Candidate{ID: fmt.Sprintf("runner-%08x", rng.Uint32()), Weight: w}
	}
	return out
}

// idealOf returns each eligible runner's weighted ideal share of group g,
// computed from the raw weights as the brief states it: S × w / Σw.
func idealOf(g string, shards int, runners []Candidate) map[string]float64 {
	total := 0.0
	elig := map[string]float64{}
	for _, r := range runners {
		if r.ID != "" && r.Weight > 0 && !math.IsInf(r.Weight, 0) && (len(r.Groups) == 0 || slices.Contains(r.Groups, g)) {
			elig[r.ID] = r.Weight
			total += r.Weight
		}
	}
	out := map[string]float64{}
	for id, w := range elig {
		out[id] = float64(shards) * w / total
	}
	return out
}

// checkBalance fails unless every eligible runner of every group owns a
// number of that group's shards within max(10% of its ideal, 1) of it, every
// shard is owned by an eligible runner, and no ineligible runner owns any.
// Runner ids must be unique.
func checkBalance(t testing.TB, a Assignment, groups []string, shards int, runners []Candidate) {
	t.Helper()
	for _, g := range groups {
		ideal := idealOf(g, shards, runners)
		counts := map[string]int{}
		for k := range shards {
			owner, ok := a[storage.ShardID{Group: g, Index: k}]
			if len(ideal) == 0 {
				if ok {
					t.Fatalf("%s/%d assigned to %q but no runner is eligible", g, k, owner)
				}
				continue
			}
			if !ok {
				t.Fatalf("%s/%d unassigned with %d eligible runners", g, k, len(ideal))
			}
			if _, elig := ideal[owner]; !elig {
				t.Fatalf("%s/%d assigned to ineligible runner %q", g, k, owner)
			}
			counts[owner]++
		}
		for id, want := range ideal {
			tol := max(0.1*want, 1)
			if got := float64(counts[id]); math.Abs(got-want) > tol+1e-9 {
				t.Fatalf("group %s: runner %s owns %v shards, ideal %.3f ± %.3f (%d runners)", g, id, got, want, tol, len(ideal))
			}
		}
	}
}

// moved counts the shards whose owner differs between a and b, including
// shards present in only one of them.
func movedShards(a, b Assignment) int {
	n := 0
	for s, o := range a {
		if b[s] != o {
			n++
		}
	}
	for s := range b {
		if _, ok := a[s]; !ok {
			n++
		}
	}
	return n
}

func shuffledCopy[T any](rng *rand.Rand, in []T) []T {
	out := slices.Clone(in)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// referenceEligible is step 2 of the specification done literally: the
// eligible runners of group g sorted by id, their normalised weights, and
// the weights their shares come from with their total (step 4).
func referenceEligible(cands []candidate, g string) (ids []string, ws, shares []float64, total float64) {
	var raws []float64
	wmax := 0.0
	for _, c := range cands {
		if c.weight > 0 && c.serves(g) {
			wmax = max(wmax, c.weight)
		}
	}
	for _, c := range cands {
		if c.weight > 0 && c.serves(g) && c.weight/wmax > 0 {
			ids = append(ids, c.id)
			ws = append(ws, c.weight/wmax)
			raws = append(raws, c.weight)
		}
	}
	shares = raws
	for _, w := range shares {
		total += w
	}
	if math.IsInf(total, 0) {
		shares, total = ws, 0
		for _, w := range shares {
			total += w
		}
	}
	return ids, ws, shares, total
}

// referenceAssignV1 is ProcedureV1's cold start done literally: sort every
// (shard, runner) pair of a group and walk the list. It shares the scoring
// code with Assign (pinned by the golden tests) but none of the placement.
func referenceAssignV1(groups []string, shards int, runners []Candidate) Assignment {
	out := Assignment{}
	if shards <= 0 {
		return out
	}
	cands := mergeCandidates(runners)
	done := map[string]bool{}
	for _, g := range groups {
		if done[g] {
			continue
		}
		done[g] = true
		ids, ws, shares, total := referenceEligible(cands, g)
		if len(ids) == 0 {
			continue
		}
		lo, hi, count := make([]int, len(ids)), make([]int, len(ids)), make([]int, len(ids))
		deficit := 0
		for r, w := range shares {
			ideal := float64(shards) * w / total
			lo[r], hi[r] = int(math.Floor(ideal)), int(math.Ceil(ideal))
			deficit += lo[r]
		}
		var pairs []scoredPair
		for k := range shards {
			for r, id := range ids {
				pairs = append(pairs, scoredPair{score: rendezvousScore(ws[r], hashKey(g, k, id)), runner: r, shard: k})
			}
		}
		sort.Slice(pairs, func(i, j int) bool { return pairs[i].before(pairs[j]) })
		unplaced := shards
		for _, p := range pairs {
			sid := storage.ShardID{Group: g, Index: p.shard}
			if _, placed := out[sid]; placed {
				continue
			}
			r := p.runner
			if count[r] < lo[r] || (count[r] < hi[r] && unplaced > deficit) {
				if count[r] < lo[r] {
					deficit--
				}
				count[r]++
				unplaced--
				out[sid] = ids[r]
			}
		}
	}
	return out
}

// referenceReassign is steps 4–6 of the specification (ProcedureV2) done
// literally: bands, targets adjusted one shard at a time by scanning every
// runner, keep by sorting each owner's shards, then sort every pair of the
// shards nobody kept and walk the list. It shares the scoring code with
// Reassign but none of the placement.
func referenceReassign(groups []string, shards int, runners []Candidate, current Assignment) Assignment {
	out := Assignment{}
	if shards <= 0 {
		return out
	}
	cands := mergeCandidates(runners)
	done := map[string]bool{}
	for _, g := range groups {
		if done[g] {
			continue
		}
		done[g] = true
		ids, ws, shares, total := referenceEligible(cands, g)
		if len(ids) == 0 {
			continue
		}
		n := len(ids)
		ideal, lo, hi, target, count := make([]float64, n), make([]int, n), make([]int, n), make([]int, n), make([]int, n)
		held := make([][]int, n)
		for k := range shards {
			if r := slices.Index(ids, current[storage.ShardID{Group: g, Index: k}]); r >= 0 {
				held[r] = append(held[r], k)
			}
		}
		sum := 0
		for r, w := range shares {
			ideal[r] = float64(shards) * w / total
			tol := max(0.1*ideal[r], 1)
			lo[r] = int(min(max(math.Ceil(ideal[r]-tol), 0), math.Floor(ideal[r])))
			hi[r] = int(min(max(math.Floor(ideal[r]+tol), math.Ceil(ideal[r])), float64(shards)))
			target[r] = min(max(len(held[r]), lo[r]), hi[r])
			sum += target[r]
		}
		for sum != shards {
			best := -1
			for r := range n {
				var gap float64
				if sum < shards {
					if target[r] >= hi[r] {
						continue
					}
					gap = ideal[r] - float64(target[r])
				} else {
					if target[r] <= lo[r] {
						continue
					}
					gap = float64(target[r]) - ideal[r]
				}
				if best < 0 {
					best = r
					continue
				}
				bestGap := ideal[best] - float64(target[best])
				if sum > shards {
					bestGap = -bestGap
				}
				if gap > bestGap {
					best = r
				}
			}
			if sum < shards {
				target[best]++
				sum++
			} else {
				target[best]--
				sum--
			}
		}
		for r, ks := range held {
			sort.Slice(ks, func(i, j int) bool {
				si, sj := rendezvousScore(ws[r], hashKey(g, ks[i], ids[r])), rendezvousScore(ws[r], hashKey(g, ks[j], ids[r]))
				if si != sj {
					return si > sj
				}
				return ks[i] < ks[j]
			})
			for _, k := range ks[:min(len(ks), target[r])] {
				out[storage.ShardID{Group: g, Index: k}] = ids[r]
				count[r]++
			}
		}
		var pairs []scoredPair
		for k := range shards {
			if _, kept := out[storage.ShardID{Group: g, Index: k}]; kept {
				continue
			}
			for r, id := range ids {
				pairs = append(pairs, scoredPair{score: rendezvousScore(ws[r], hashKey(g, k, id)), runner: r, shard: k})
			}
		}
		sort.Slice(pairs, func(i, j int) bool { return pairs[i].before(pairs[j]) })
		for _, p := range pairs {
			sid := storage.ShardID{Group: g, Index: p.shard}
			if _, placed := out[sid]; placed || count[p.runner] >= target[p.runner] {
				continue
			}
			count[p.runner]++
			out[sid] = ids[p.runner]
		}
	}
	return out
}

// ---- assignment ----

// goldenRunners is the fixed input of TestAssignGolden.
var goldenRunners = []Candidate{
	{ID: "a", Weight: 1},
	{ID: "b", Weight: 2},
	{ID: "c", Weight: 1, Groups: []string{"jobs"}},
	{ID: "d", Weight: 0},
}

// TestAssignGolden pins a small assignment: owners of shards 0..15 of each
// group, one letter per shard, for both procedures (v2: shares 4/4/8 in
// jobs and 5/11 in default, the ceiling going to the larger fraction of the
// ideal; v1: 6/10 in default, the walk's choice). An accidental change to
// the hash, the score, the bands, the targets or the placement order breaks
// it; the hash and scores themselves are pinned against an independent
// implementation in TestHashGolden, the placement against the literal walks
// in TestAssignMatchesSpecWalk.
func TestAssignGolden(t *testing.T) {
	for _, c := range []struct {
		p    Procedure
		want map[string]string
	}{
		{ProcedureV2, map[string]string{"default": "babaabbabbbabbbb", "jobs": "caacccbabbbabbbb"}},
		{ProcedureV1, map[string]string{"default": "babaabbabbbababb", "jobs": "caacccbabbbabbbb"}},
	} {
		a := c.p.Assign([]string{"default", "jobs"}, 16, goldenRunners)
		for g, owners := range c.want {
			var got strings.Builder
			for k := range 16 {
				got.WriteString(a[storage.ShardID{Group: g, Index: k}])
			}
			if got.String() != owners {
				t.Errorf("%s: group %s owners = %q, want %q", c.p, g, got.String(), owners)
			}
		}
		if len(a) != 32 {
			t.Errorf("%s: assignment has %d shards, want 32", c.p, len(a))
		}
	}
	if a, b := Assign([]string{"default"}, 16, goldenRunners), ProcedureV2.Assign([]string{"default"}, 16, goldenRunners); !maps.Equal(a, b) {
		t.Error("Assign is not ProcedureV2's")
	}
}

// TestAssignMatchesSpecWalk proves the heap-based placement equals the
// specification's literal procedure (and v1's literal walk), on random
// memberships.
func TestAssignMatchesSpecWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		n := 1 + rng.IntN(12)
		shards := 1 + rng.IntN(80)
		runners := randomRunners(rng, n, i%2 == 1)
		for j := range runners {
			switch rng.IntN(6) {
			case 0:
				runners[j].Groups = []string{"a"}
			case 1:
				runners[j].Groups = []string{"b", "c"}
			case 2:
				runners[j].Weight = 0.001 + rng.Float64()*5
			}
		}
		groups := []string{"a", "b", "c"}
		if got, want := Assign(groups, shards, runners), referenceReassign(groups, shards, runners, nil); !maps.Equal(got, want) {
			t.Fatalf("case %d (%d runners, %d shards): heap placement differs from the spec in %d shards", i, n, shards, movedShards(got, want))
		}
		if got, want := ProcedureV1.Assign(groups, shards, runners), referenceAssignV1(groups, shards, runners); !maps.Equal(got, want) {
			t.Fatalf("case %d (%d runners, %d shards): v1 heap placement differs from its walk in %d shards", i, n, shards, movedShards(got, want))
		}
	}
}

// TestReassignMatchesSpec proves Reassign equals the specification's
// literal procedure from random owners: runners that left, unknown ones,
// one runner holding far too much, drained ones.
func TestReassignMatchesSpec(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	groups := []string{"a", "b"}
	for i := range 300 {
		n := 1 + rng.IntN(12)
		shards := 1 + rng.IntN(80)
		runners := randomRunners(rng, n, i%2 == 1)
		mixRunners(rng, runners, 6)
		cur := Assignment{}
		for _, g := range groups {
			for k := range shards {
				switch rng.IntN(4) {
				case 0:
				case 1:
					cur[storage.ShardID{Group: g, Index: k}] = "ghost"
				case 2:
					cur[storage.ShardID{Group: g, Index: k}] = runners[0].ID
				default:
					cur[storage.ShardID{Group: g, Index: k}] = runners[rng.IntN(n)].ID
				}
			}
		}
		if got, want := Reassign(groups, shards, runners, cur), referenceReassign(groups, shards, runners, cur); !maps.Equal(got, want) {
			t.Fatalf("case %d (%d runners, %d shards): Reassign differs from the spec in %d shards", i, n, shards, movedShards(got, want))
		}
	}
}

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

// TestMovement measures how many shards change owner when one runner joins
// or leaves, as the sharding Manager computes it (Reassign from the current
// owners).
// A leave moves exactly the leaver's shards, the minimum; a join moves what
// the newcomer takes, within 1.2× its ideal share on every change (in fact
// about 1×), from 256 shards over 2–50 runners (5 each) to 4096 shards.
//
// (Assign alone, a function of the membership only, cannot do this with the
// balance bound when runners own few shards: with 256 shards over 49–51
// runners every runner holds 5 or 6, and for each runner y's leave to move
// only y's shards they must land on a set D(y) of runners at 5; removing y
// then z, or z then y, must give the same map, which forces D(y) and D(z)
// apart, and 51 disjoint sets of 5 do not fit in 51 runners. Keeping shards
// with their current owners is what makes minimal movement possible.)
func TestMovement(t *testing.T) {
	all := func(from, to, step int) []int {
		var ns []int
		for n := from; n <= to; n += step {
			ns = append(ns, n)
		}
		return ns
	}
	regimes := []struct {
		name      string
		shards    int
		ns        []int
		seeds     uint64
		mean, max float64
	}{
		{"4096 shards", 4096, []int{2, 5, 10, 20, 30, 40, 50}, 2, 1.2, 1.2},
		{"256 shards, few runners", 256, all(2, 10, 1), 6, 1.2, 1.2},
		{"256 shards", 256, all(2, 50, 1), 4, 1.2, 1.2},
	}
	for _, r := range regimes {
		for _, mixed := range []bool{false, true} {
			name := fmt.Sprintf("%s/mixed=%v", r.name, mixed)
			t.Run(name, func(t *testing.T) {
				if testing.Short() && r.shards > 256 {
					t.Skip("large shard counts are slow under -short")
				}
				cases := measureMovement(r.shards, r.ns, r.seeds, mixed)
				sum, worst := 0.0, 0.0
				for _, c := range cases {
					sum += c.join
					worst = max(worst, c.join)
					if !c.leaveOwn {
						t.Errorf("n=%d seed=%d: a leave moved shards the leaver did not own", c.n, c.seed)
					}
				}
				mean := sum / float64(len(cases))
				table := movementTable(cases)
				t.Logf("join: mean %.2f, worst %.2f of the ideal share; leaves moved exactly the leaver's shards\n%s", mean, worst, table)
				if mean > r.mean || worst > r.max {
					t.Fatalf("join movement ratio mean %.2f (bound %.2f), worst %.2f (bound %.2f)\n%s", mean, r.mean, worst, r.max, table)
				}
			})
		}
	}
}

// TestDrain: a runner whose weight drops to 0 (or to NaN, ±Inf, a negative
// value) owns nothing, and the assignment is exactly the one without it, so
// that its leaving later moves nothing. Draining from the current owners
// moves its shards and nothing else.
func TestDrain(t *testing.T) {
	groups := []string{"default"}
	for _, drained := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		rs := randomRunners(rand.New(rand.NewPCG(13, 14)), 6, true)
		before := Assign(groups, 256, rs)
		rs[2].Weight = drained
		after := Assign(groups, 256, rs)
		if n := len(after.ShardsOf(rs[2].ID)); n != 0 {
			t.Fatalf("runner drained with weight %v still owns %d shards", drained, n)
		}
		if without := Assign(groups, 256, slices.Delete(slices.Clone(rs), 2, 3)); !maps.Equal(after, without) {
			t.Fatalf("weight %v: assignment differs from the one without the runner in %d shards", drained, movedShards(after, without))
		}
		for _, s := range before.ShardsOf(rs[2].ID) {
			if after[s] == rs[2].ID || after[s] == "" {
				t.Fatalf("weight %v: drained runner's shard %s not reassigned (owner %q)", drained, s, after[s])
			}
		}
	}

	// Drained from the current owners (what the sharding Manager does),
	// exactly the drained runner's shards move, whatever the sizes.
	for _, shards := range []int{256, 4096} {
		for _, n := range []int{2, 3, 5, 8, 20, 50} {
			for seed := range uint64(6) {
				rs := randomRunners(rand.New(rand.NewPCG(seed, uint64(n))), n, seed%2 == 1)
				before := Assign(groups, shards, rs)
				own := len(before.ShardsOf(rs[0].ID))
				rs[0].Weight = 0
				after := Reassign(groups, shards, rs, before)
				checkBalance(t, after, groups, shards, rs)
				if m := movedShards(before, after); m != own {
					t.Fatalf("%d shards, %d runners, seed %d: draining moved %d shards, want only its own %d", shards, n, seed, m, own)
				}
			}
		}
	}
}

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

// mixRunners makes some of runners serve only group "a", some drained
// (weight 0) and some of another weight: each with one chance in outOf.
func mixRunners(rng *rand.Rand, runners []Candidate, outOf int) {
	for j := range runners {
		switch rng.IntN(outOf) {
		case 0:
			runners[j].Groups = []string{"a"}
		case 1:
			runners[j].Weight = 0
		case 2:
			runners[j].Weight = 0.001 + rng.Float64()*5
		}
	}
}
