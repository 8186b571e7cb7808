package placement

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// BenchmarkAssign measures one full assignment of one group (a cold start)
// for shards × runners in {256, 4096, 16384} × {3, 100, 1000}, equal
// weights (mixed weights cost the same: every score is computed either way).
func BenchmarkAssign(b *testing.B) {
	for _, shards := range []int{256, 4096, 16384} {
		for _, n := range []int{3, 100, 1000} {
			b.Run(fmt.Sprintf("shards=%d/runners=%d", shards, n), func(b *testing.B) {
				runners := randomRunners(rand.New(rand.NewPCG(1, uint64(n))), n, false)
				groups := []string{"default"}
				b.ReportAllocs()
				for b.Loop() {
					if a := Assign(groups, shards, runners); len(a) != shards {
						b.Fatalf("assigned %d shards, want %d", len(a), shards)
					}
				}
			})
		}
	}
}

// BenchmarkReassign measures what a runner computes on a membership change:
// the assignment after one runner joins, from the current owners.
func BenchmarkReassign(b *testing.B) {
	for _, shards := range []int{256, 4096, 16384} {
		for _, n := range []int{3, 100, 1000} {
			b.Run(fmt.Sprintf("shards=%d/runners=%d", shards, n), func(b *testing.B) {
				runners := randomRunners(rand.New(rand.NewPCG(1, uint64(n))), n+1, false)
				groups := []string{"default"}
				current := Assign(groups, shards, runners[:n])
				b.ReportAllocs()
				for b.Loop() {
					if a := Reassign(groups, shards, runners, current); len(a) != shards {
						b.Fatalf("assigned %d shards, want %d", len(a), shards)
					}
				}
			})
		}
	}
}

// movementCase is one measured membership change.
type movementCase struct {
	shards, n int
	mixed     bool
	seed      uint64
	join      float64 // shards moved when runner n+1 joins n, over its ideal share
	leave     float64 // shards moved when one of n leaves, over its ideal share
	leaveOwn  bool    // the leave moved exactly the leaver's shards
}

// measureMovement measures joins and leaves for n in ns, as the sharding
// Manager makes them (Reassign from the current owners): a runner joining n
// random runners (weight 1, 2 or 3 in turn when mixed), and the first of
// them (weight 1) leaving. A ratio of 1 is the ideal: as many shards move as
// the runner that comes or goes should own.
func measureMovement(shards int, ns []int, seeds uint64, mixed bool) []movementCase {
	var out []movementCase
	for _, n := range ns {
		for seed := range seeds {
			rng := rand.New(rand.NewPCG(seed+100, uint64(n)))
			rs := randomRunners(rng, n+1, mixed)
			groups := []string{"default"}
			base := Assign(groups, shards, rs[:n])
			join := Reassign(groups, shards, rs, base)
			leave := Reassign(groups, shards, rs[1:n], base)
			out = append(out, movementCase{
				shards: shards, n: n, mixed: mixed, seed: seed,
				leaveOwn: movedShards(base, leave) == len(base.ShardsOf(rs[0].ID)),
				join:     float64(movedShards(base, join)) / idealOf("default", shards, rs)[rs[n].ID],
				leave:    float64(movedShards(base, leave)) / idealOf("default", shards, rs[:n])[rs[0].ID],
			})
		}
	}
	return out
}

// movementTable renders the worst ratios per n, for failure messages and
// -v runs.
func movementTable(cases []movementCase) string {
	var b strings.Builder
	worst := map[int][2]float64{}
	var ns []int
	for _, c := range cases {
		w, seen := worst[c.n]
		if !seen {
			ns = append(ns, c.n)
		}
		worst[c.n] = [2]float64{max(w[0], c.join), max(w[1], c.leave)}
	}
	b.WriteString("n: worst join/leave ratio\n")
	for i, n := range ns {
		fmt.Fprintf(&b, "%3d: %.2f/%.2f", n, worst[n][0], worst[n][1])
		if i%6 == 5 {
			b.WriteString("\n")
		} else {
			b.WriteString("   ")
		}
	}
	return b.String()
}
