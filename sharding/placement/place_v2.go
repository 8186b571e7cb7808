package placement

import "github.com/tenurehq/tenure/storage"

// assignGroupV2 is steps 5 and 6 of the specification: target counts from
// the current counts, then each owner keeps what its target allows, and
// the walk gives the other shards to the runners below their targets.
func (p *placer) assignGroupV2(out Assignment, shards int) {
	held := p.held()
	p.targets(held, shards)
	p.keepUpTo(out, held, p.target)
	// The walk starts from the best pair of every shard nobody kept: the
	// start's, or for a shard its holder gave up, computed now.
	free := p.heap[:0]
	for _, sp := range p.heap {
		if p.owner[sp.shard] >= 0 {
			continue
		}
		if sp.runner < 0 {
			sp = p.startBest(sp.shard)
		}
		free = append(free, sp)
	}
	p.heap = free
	p.heap.init()
	p.walkLo, p.walkHi = p.target, p.target
	deficit := 0
	for r, t := range p.target {
		deficit += t - p.count[r]
	}
	p.walk(out, deficit)
}

// keepUpTo places the shards owners keep: each eligible runner r keeps its
// held shards up to limit[r], the ones it scores highest when it holds more.
// It sets the counts, leaves p.owner[k] the runner that keeps k or -1, and
// returns how many were kept.
func (p *placer) keepUpTo(out Assignment, held [][]int, limit []int) int {
	kept := 0
	for r, ks := range held {
		if len(ks) > limit[r] {
			for _, k := range ks {
				p.owner[k] = -1
			}
			ks = p.keepBest(r, ks, limit[r])
			for _, k := range ks {
				p.owner[k] = int32(r)
			}
		}
		for _, k := range ks {
			out[storage.ShardID{Group: p.group, Index: k}] = p.ids[r]
		}
		p.count[r] = len(ks)
		kept += len(ks)
	}
	return kept
}

// targets sets every runner's target count (step 5): its current count
// clamped to its band, then adjusted one shard at a time, by the runner
// furthest from its ideal in the direction needed, until the targets add
// up to the shards. The bands allow it: Σ lo ≤ shards ≤ Σ hi.
func (p *placer) targets(held [][]int, shards int) {
	n := len(p.ids)
	p.target = resizeInts(p.target, n)
	sum := 0
	for r := range n {
		t := min(max(len(held[r]), p.lo[r]), p.hi[r])
		p.target[r] = t
		sum += t
	}
	if sum == shards {
		return
	}
	step := 1 // add shards
	if sum > shards {
		step = -1 // give shards up
	}
	movable := func(r int) bool {
		if step > 0 {
			return p.target[r] < p.hi[r]
		}
		return p.target[r] > p.lo[r]
	}
	// gap is how far r is from its ideal in the direction of the step:
	// ideal − target when adding, target − ideal when giving up.
	gap := func(r int) float64 {
		d := float64(p.ideal[r] - float64(p.target[r]))
		if step < 0 {
			return -d
		}
		return d
	}
	first := func(a, b int) bool {
		if ga, gb := gap(a), gap(b); ga != gb {
			return ga > gb
		}
		return a < b // first by id on a tie
	}
	h := runnerHeap{less: first, r: p.order[:0]}
	for r := range n {
		if movable(r) {
			h.r = append(h.r, r)
		}
	}
	h.init()
	for sum != shards && len(h.r) > 0 {
		r := h.r[0]
		p.target[r] += step
		sum += step
		if movable(r) {
			h.down(0)
		} else {
			h.pop()
		}
	}
	p.order = h.r
}

// runnerHeap is a binary heap of runner indices whose root comes first by
// less.
type runnerHeap struct {
	less func(a, b int) bool
	r    []int
}

func (h *runnerHeap) init() {
	for i := len(h.r)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *runnerHeap) pop() {
	last := len(h.r) - 1
	h.r[0] = h.r[last]
	h.r = h.r[:last]
	h.down(0)
}

func (h *runnerHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h.r) {
			return
		}
		c := l
		if r := l + 1; r < len(h.r) && h.less(h.r[r], h.r[l]) {
			c = r
		}
		if !h.less(h.r[c], h.r[i]) {
			return
		}
		h.r[i], h.r[c] = h.r[c], h.r[i]
		i = c
	}
}
