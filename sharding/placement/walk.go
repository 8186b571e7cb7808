package placement

import (
	"slices"

	"github.com/tenurehq/tenure/storage"
)

// walk places the unplaced shards, whose best pairs are in p.heap (step 5).
// It walks the pairs in order with a lazy max-heap holding, for every
// unplaced shard, its best pair at the time it was pushed. Availability only
// ever shrinks (counts only grow, and unplaced − deficit never increases), so
// a popped pair whose runner is still available is the next pair of the walk
// that places a shard; one whose runner is no longer available is replaced
// by the shard's best remaining pair, which can only rank lower. deficit is
// the shards still needed to lift every runner to its lo.
//
// Once a single runner is available, it takes every shard left (placeAll).
// Available are the runners below their walkLo when slack is 0, else those
// below their walkHi (walkLo ≤ walkHi); the walk counts both.
func (p *placer) walk(out Assignment, deficit int) {
	g := p.group
	unplaced := len(p.heap)
	belowLo, belowHi := 0, 0
	for r, c := range p.count {
		belowLo += b2i(c < p.walkLo[r])
		belowHi += b2i(c < p.walkHi[r])
	}
	for unplaced > 0 {
		slack := max(unplaced-deficit, 0)
		top := p.heap[0]
		k, r := top.shard, top.runner
		if !p.available(r, slack) {
			if (slack == 0 && belowLo == 1) || (slack > 0 && belowHi == 1) {
				p.placeAll(out, p.firstAvailable(slack))
				return
			}
			r, s := p.bestOf(k, slack)
			p.heap[0] = scoredPair{score: s, runner: r, shard: k}
			p.heap.down(0)
			continue
		}
		if p.count[r] < p.walkLo[r] {
			deficit--
		}
		p.count[r]++
		belowLo -= b2i(p.count[r] == p.walkLo[r])
		belowHi -= b2i(p.count[r] == p.walkHi[r])
		unplaced--
		out[storage.ShardID{Group: g, Index: k}] = p.ids[r]
		p.heap.pop()
	}
}

// bestOf returns the best pair of shard k, its runner and score, among the
// runners available given slack (all of them when slack < 0), from the
// start's bounds.
func (p *placer) bestOf(k, slack int) (int, float64) {
	p.buf = appendKey(slices.Grow(p.buf[:0], p.keyCap), p.group, k)
	if n := len(p.ids); p.topK == 0 {
		return p.best(p.cb[k*n:(k+1)*n], p.buf, -1, slack)
	}
	return p.bestTop(k, slack, p.buf, &p.row)
}

// firstAvailable returns the first runner available given slack (see
// best: there is one while shards are unplaced).
func (p *placer) firstAvailable(slack int) int {
	for r := range p.ids {
		if p.available(r, slack) {
			return r
		}
	}
	return 0 // unreachable
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// placeAll gives every shard still unplaced (in p.heap) to runner r. The
// walk calls it when r is the only runner available: availability only
// shrinks and some runner is available while shards are unplaced (see
// best), so the walk would give r all of them, whatever their order; this
// spares re-ranking each shard first (with a join, most of those the
// others gave up: they all go to the newcomer).
func (p *placer) placeAll(out Assignment, r int) {
	for _, sp := range p.heap {
		out[storage.ShardID{Group: p.group, Index: sp.shard}] = p.ids[r]
	}
	p.count[r] += len(p.heap)
	p.heap = p.heap[:0]
}

// available reports whether runner r may take one more shard, given slack =
// unplaced − deficit.
func (p *placer) available(r, slack int) bool {
	return p.count[r] < p.walkLo[r] || (p.count[r] < p.walkHi[r] && slack > 0)
}
