package placement

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tenurehq/tenure/storage"
)

// Helpers shared by the package's tests and benchmarks: random
// memberships, ideal shares, the balance check and movement counts.

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
