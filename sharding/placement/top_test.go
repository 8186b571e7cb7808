package placement

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tenurehq/tenure/storage"
)

// TestManyRunnersMatchSpec: in groups where a shard keeps only its maxTop
// lowest bounds (keepLowest, lowered to small groups here), the walk decides from the kept bounds or hashes the row again
// (bestTop), and the start rejects hashes below the cutoff (boundCutoff);
// the result must still be the specification's literal walk, cold and from
// random owners, with equal, mixed and arbitrary weights and groups.
func TestManyRunnersMatchSpec(t *testing.T) {
	defer func(v int) { keepLowestPairs = v }(keepLowestPairs)
	keepLowestPairs = 0 // groups the spec's walk can check in time
	rng := rand.New(rand.NewPCG(11, 12))
	groups := []string{"a", "b"}
	for i := range 20 {
		n := 4*maxTop + 1 + rng.IntN(60)
		shards := 4*n + rng.IntN(4*n)
		runners := randomRunners(rng, n, i%3 == 1)
		mixRunners(rng, runners, 8)
		if got, want := Assign(groups, shards, runners), referenceReassign(groups, shards, runners, nil); !maps.Equal(got, want) {
			t.Fatalf("case %d (%d runners, %d shards): Assign differs from the spec in %d shards", i, n, shards, movedShards(got, want))
		}
		if got, want := ProcedureV1.Assign(groups, shards, runners), referenceAssignV1(groups, shards, runners); !maps.Equal(got, want) {
			t.Fatalf("case %d (%d runners, %d shards): v1 differs from its walk in %d shards", i, n, shards, movedShards(got, want))
		}
		cur := Assignment{}
		for _, g := range groups {
			for k := range shards {
				if rng.IntN(3) > 0 {
					cur[storage.ShardID{Group: g, Index: k}] = runners[rng.IntN(n)].ID
				}
			}
		}
		if got, want := Reassign(groups, shards, runners, cur), referenceReassign(groups, shards, runners, cur); !maps.Equal(got, want) {
			t.Fatalf("case %d (%d runners, %d shards): Reassign differs from the spec in %d shards", i, n, shards, movedShards(got, want))
		}
	}
}

// TestBoundCutoff: every hash at or below the cutoff has a bound of at
// least the threshold for any weight (1/w ≥ 1), and the cutoff is close:
// just above it, weight-1 bounds fall below the threshold.
func TestBoundCutoff(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 2000 {
		thr := costBound(1, rng.Uint64())
		cut := boundCutoff(thr)
		if cut < 0 {
			continue
		}
		for _, invW := range []float64{1, 1.0000001, 1.5, 3, 1000} {
			for _, m := range []int64{cut, cut - 1, cut / 2, 0} {
				if m < 0 {
					continue
				}
				if c := costBound(invW, uint64(m)<<12); c < thr {
					t.Fatalf("thr %g: m %d ≤ cutoff %d has bound %g < thr (1/w %g)", thr, m, cut, c, invW)
				}
			}
		}
		// Conservative by little: a weight-1 hash a few float32 steps of
		// the threshold above the cutoff is below it.
		ulp := float64(math.Nextafter32(thr, float32(math.Inf(1))) - thr)
		if m := cut + int64(4*ulp*0x1p52) + 2; m < 1<<52 && costBound(1, uint64(m)<<12) >= thr {
			t.Fatalf("thr %g: cutoff %d is far below where weight-1 bounds reach it", thr, cut)
		}
	}
	if boundCutoff(float32(math.Inf(1))) != -1 {
		t.Fatal("an infinite threshold must reject nothing")
	}
}

// TestSelectFirst: selectFirst leaves the same first t as a full sort, for
// every t, on random scores with ties (broken by shard index).
func TestSelectFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for range 200 {
		n := rng.IntN(60)
		a := make([]ranked, n)
		for i := range a {
			a[i] = ranked{k: i, score: float64(rng.IntN(8))}
		}
		rng.Shuffle(n, func(i, j int) { a[i], a[j] = a[j], a[i] })
		sorted := slices.Clone(a)
		slices.SortFunc(sorted, func(x, y ranked) int {
			if x.before(y) {
				return -1
			}
			return 1
		})
		for limit := 0; limit <= n; limit++ {
			got := slices.Clone(a)
			selectFirst(got, limit)
			first := shardsOf(got[:limit])
			slices.Sort(first)
			want := shardsOf(sorted[:limit])
			slices.Sort(want)
			if !slices.Equal(first, want) {
				t.Fatalf("n %d, t %d: first %v, want %v", n, limit, first, want)
			}
		}
	}
}
