package placement

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMovement measures how many shards change owner when one runner joins
// or leaves, as the sharding Manager computes it (Reassign from the current
// owners). A leave moves exactly the leaver's shards, the minimum; a join
// moves what the newcomer takes, within 1.2× its ideal share on every
// change (in fact about 1×), from 256 shards over 2–50 runners (5 each) to
// 4096 shards.
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
