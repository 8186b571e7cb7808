package placement

import (
	"slices"

	"github.com/tenurehq/tenure/storage"
)

// assignGroupV1 is ProcedureV1's placement: keep up to hi, a cold start
// by the walk within floor and ceiling, else place the free shards and
// lift runners below their lo.
func (p *placer) assignGroupV1(out Assignment, shards int) {
	kept := p.keepUpTo(out, p.held(), p.hi)
	if kept == 0 {
		// Cold start: place everything as tightly as possible, so that
		// later changes find every runner inside its band with room to
		// spare, and move little.
		p.walkLo, p.walkHi = p.flo, p.fhi
		for i, sp := range p.heap {
			if sp.runner < 0 { // held, but by nobody who kept it
				p.heap[i] = p.startBest(sp.shard)
			}
		}
		p.heap.init()
		deficit := 0
		for _, lo := range p.walkLo {
			deficit += lo
		}
		p.walk(out, deficit)
		return
	}
	p.placeFree(out, shards)
	p.steal(out, shards)
}

// placeFree places the shards nobody keeps (step 6b). First every (free
// shard, runner) pair is walked in the order of step 3 to lift runners to
// their lo; then, one shard at a time, the runner furthest below its ideal
// share takes the free shard it scores highest. So the shards a join frees
// (from runners now above their band) go to the newcomer, and those of a
// runner that left to the runners short of their share.
func (p *placer) placeFree(out Assignment, shards int) {
	n := len(p.ids)
	var pairs []scoredPair
	free := 0
	for k := 0; k < shards; k++ {
		if _, ok := out[storage.ShardID{Group: p.group, Index: k}]; ok {
			continue
		}
		free++
		p.buf = appendKey(slices.Grow(p.buf[:0], p.keyCap), p.group, k)
		for r := 0; r < n; r++ {
			pairs = append(pairs, scoredPair{score: p.exact(p.buf, r), runner: r, shard: k})
		}
	}
	slices.SortFunc(pairs, func(a, b scoredPair) int {
		if a.before(b) {
			return -1
		}
		if b.before(a) {
			return 1
		}
		return 0
	})
	placed := make(map[int]bool, free)
	place := func(r, k int) {
		placed[k] = true
		p.count[r]++
		free--
		out[storage.ShardID{Group: p.group, Index: k}] = p.ids[r]
	}
	for _, sp := range pairs {
		if !placed[sp.shard] && p.count[sp.runner] < p.lo[sp.runner] {
			place(sp.runner, sp.shard)
		}
	}
	// Each runner's free shards in its own order of preference.
	prefs := make([][]int, n)
	for _, sp := range pairs {
		if !placed[sp.shard] {
			prefs[sp.runner] = append(prefs[sp.runner], sp.shard)
		}
	}
	next := make([]int, n)
	for free > 0 {
		// Σ(ideal − count) = free > 0, so the neediest runner is below its
		// ideal, hence below its hi.
		r := 0
		for c := 1; c < n; c++ {
			if float64(p.ideal[c]-float64(p.count[c])) > float64(p.ideal[r]-float64(p.count[r])) {
				r = c
			}
		}
		for placed[prefs[r][next[r]]] {
			next[r]++
		}
		place(r, prefs[r][next[r]])
	}
}

// steal lifts every runner still below its lo (a newcomer: the walk had no
// free shards for it) to lo (step 6b): in id order, each takes the shards it
// scores highest among those of runners above their lo, until it reaches
// lo. Donors only shrink and never below lo, so one pass over each taker's
// ranking suffices.
func (p *placer) steal(out Assignment, shards int) {
	index := make(map[string]int, len(p.ids))
	for r, id := range p.ids {
		index[id] = r
	}
	all := make([]int, shards)
	for k := range all {
		all[k] = k
	}
	for r := range p.ids {
		if p.count[r] >= p.lo[r] {
			continue
		}
		for _, k := range p.preferred(r, all) {
			if p.count[r] >= p.lo[r] {
				break
			}
			sh := storage.ShardID{Group: p.group, Index: k}
			d := index[out[sh]]
			if d == r || p.count[d] <= p.lo[d] {
				continue
			}
			out[sh] = p.ids[r]
			p.count[d]--
			p.count[r]++
		}
	}
}
