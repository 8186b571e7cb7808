package placement

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tenurehq/tenure/storage"
)

// TestKeepBestWindow: step 6a ranks a runner's held shards by their hashes
// and scores exactly only a window around the boundary (settleBoundary),
// which real hashes almost never fill. Widened so that it holds a few
// shards, many, or all of them, Reassign must still be the specification's
// literal walk: after a join (the incumbents keep three quarters of what
// they hold), and from random owners.
func TestKeepBestWindow(t *testing.T) {
	defer func(v float64) { hashWindow = v }(hashWindow)
	groups := []string{"a"}
	for _, w := range []float64{0x1p44, 0x1p48, math.Inf(1)} {
		hashWindow = w
		rng := rand.New(rand.NewPCG(17, 18))
		for i := range 12 {
			n := 2 + rng.IntN(4)
			shards := 500 + rng.IntN(2500)
			runners := randomRunners(rng, n+1, i%2 == 1)
			join := Assign(groups, shards, runners[:n])
			random := Assignment{}
			for k := range shards {
				random[storage.ShardID{Group: "a", Index: k}] = runners[rng.IntN(n)].ID
			}
			for name, cur := range map[string]Assignment{"join": join, "random owners": random} {
				if got, want := Reassign(groups, shards, runners, cur), referenceReassign(groups, shards, runners, cur); !maps.Equal(got, want) {
					t.Fatalf("window %g, case %d (%s, %d runners, %d shards): Reassign differs from the spec in %d shards",
						w, i, name, n+1, shards, movedShards(got, want))
				}
			}
		}
	}
}

// TestSettleBoundary: the shards a runner keeps are the ones with the
// highest exact scores (then the lowest index), also when the exact order
// differs from the hash order within the window: the scores here are the
// hash plus a jitter below the window, so pairs a window apart keep the
// hash order and closer ones may not (as hashWindow assumes of the real
// score, whose order never differs in practice).
func TestSettleBoundary(t *testing.T) {
	defer func(v float64) { hashWindow = v }(hashWindow)
	defer func(f func(float64, uint64) float64) { windowScore = f }(windowScore)
	const jitter = 1 << 20
	windowScore = func(_ float64, h uint64) float64 {
		return float64(h>>12) + float64(hashBytes([]byte(fmt.Sprint(h)))%jitter)
	}
	rng := rand.New(rand.NewPCG(19, 20))
	p := &placer{w: []float64{0.7}}
	reordered := 0
	for i := range 300 {
		held := 1 + rng.IntN(200)
		p.ownHash = make([]uint64, held)
		ks := make([]int, held)
		for k := range ks {
			ks[k] = k
			// Hashes close together: a window holds several.
			p.ownHash[k] = uint64(rng.IntN(1<<25)) << 12
			if rng.IntN(8) == 0 && k > 0 {
				p.ownHash[k] = p.ownHash[rng.IntN(k)] // a tie, to the lower index
			}
		}
		limit := rng.IntN(held + 1)
		want := make([]ranked, held)
		byHash := make([]ranked, held)
		for j, k := range ks {
			want[j] = ranked{k, windowScore(p.w[0], p.ownHash[k])}
			byHash[j] = ranked{k, float64(p.ownHash[k] >> 12)}
		}
		selectFirst(want, limit)
		selectFirst(byHash, limit)
		wantKept := slices.Sorted(slices.Values(shardsOf(want[:limit])))
		if !slices.Equal(wantKept, slices.Sorted(slices.Values(shardsOf(byHash[:limit])))) {
			reordered++
		}
		for _, w := range []float64{jitter + 1, 1 << 24, math.Inf(1)} {
			hashWindow = w
			got := slices.Sorted(slices.Values(p.keepBest(0, slices.Clone(ks), limit)))
			if !slices.Equal(got, wantKept) {
				t.Fatalf("case %d, window %g: kept %v, want %v", i, w, got, wantKept)
			}
		}
	}
	if reordered < 30 {
		t.Fatalf("the hash order decided %d of 300 cases differently: too few to test the window", reordered)
	}
}
