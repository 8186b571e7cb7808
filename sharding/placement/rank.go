package placement

import "slices"

// A runner's ranking of shards by exact score: step 6a (the shards a
// runner keeps) and the v1 walk.

// preferred returns shards ks sorted by runner r's score, highest first
// (then by shard index).
func (p *placer) preferred(r int, ks []int) []int {
	rs := p.ranks(r, ks)
	slices.SortFunc(rs, func(a, b ranked) int {
		if a.before(b) {
			return -1
		}
		return 1 // shards are distinct: never equal
	})
	return shardsOf(rs)
}

// keepBest returns the limit shards of ks, held by runner r, that r scores
// highest (score descending, then shard index), in no particular order and
// in ks's memory: the set step 6a keeps. A selection, not a sort: a runner
// that lost most of its share keeps a few of thousands.
//
// It ranks by the hashes of the held pairs (p.ownHash), computed by the
// start, and computes exact scores only where the hashes alone might not
// decide (see settleBoundary): for one runner the score w / -ln(u) grows
// with u, and u with h>>12, so the hash order is the score order.
func (p *placer) keepBest(r int, ks []int, limit int) []int {
	if cap(p.ranked) < len(ks) {
		p.ranked = make([]ranked, len(ks))
	}
	rs := p.ranked[:len(ks)]
	for i, k := range ks {
		rs[i] = ranked{k, float64(p.ownHash[k] >> 12)} // exact: < 2^52
	}
	selectFirst(rs, limit)
	p.settleBoundary(r, rs, limit)
	out := ks[:limit] // ks is not read again
	for i, x := range rs[:limit] {
		out[i] = x.k
	}
	return out
}

// hashWindow is how far apart (in h>>12) two pairs of one runner must be
// for their computed scores to be surely in the order of their hashes.
//
// The true score w / -ln(u) of a runner grows with u, by a factor of at
// least 1 + e × 2^-52 per step of h>>12 (its relative growth per step is
// 2^-52 / (u × -ln(u)), and u × -ln(u) ≤ 1/e), so by more than 1 + 2^-35
// over 2^16 steps. The computed score is within a few units of 2^-53 of
// the true one, relative (u is exact, fdlibm's logarithm is within an ulp,
// the division within half of one; boundBelow relies on the same), far
// less than 2^-35: two held shards 2^16 or more apart are ordered by their
// hashes. Closer ones — hashes of 52 bits, a few thousand held shards —
// practically never meet at the boundary, and are then ranked exactly. A
// variable so that tests can widen it.
var hashWindow float64 = 1 << 16

// windowScore is the exact score settleBoundary ranks by: rendezvousScore,
// a variable so that tests can give it an order the hashes get wrong
// within hashWindow, as the real one never does in practice.
var windowScore = rendezvousScore

// settleBoundary makes rs[:limit], the first limit of rs by hash (in
// score), the first limit by exact score (then shard index). Let a be the
// lowest hash kept and b the highest not: a shard whose hash is at least
// b + hashWindow scores above every shard not kept, so it stays; one at
// most a - hashWindow scores below every shard kept, so it stays out.
// Only the shards in between, a window around the boundary that is empty
// unless a - b < hashWindow, are scored exactly, and the best of them by
// exact score fill the places left.
func (p *placer) settleBoundary(r int, rs []ranked, limit int) {
	if limit == 0 || limit == len(rs) {
		return
	}
	a := rs[0].score // not min and max: no NaN here, and they cost more
	for _, x := range rs[1:limit] {
		if x.score < a {
			a = x.score
		}
	}
	b := rs[limit].score
	for _, x := range rs[limit+1:] {
		if x.score > b {
			b = x.score
		}
	}
	if a-b >= hashWindow {
		return
	}
	// Gather the window contiguously around limit: its kept shards at the
	// end of rs[:limit], its others at the start of rs[limit:].
	lo := limit
	for i := limit - 1; i >= 0; i-- {
		if rs[i].score < b+hashWindow {
			lo--
			rs[i], rs[lo] = rs[lo], rs[i]
		}
	}
	hi := limit
	for i := limit; i < len(rs); i++ {
		if rs[i].score > a-hashWindow {
			rs[i], rs[hi] = rs[hi], rs[i]
			hi++
		}
	}
	w := rs[lo:hi]
	for i := range w {
		w[i].score = windowScore(p.w[r], p.ownHash[w[i].k])
	}
	selectFirst(w, limit-lo)
}

// ranked is a shard and runner r's score of it (preferred, keepBest).
type ranked struct {
	k     int
	score float64
}

// before orders by score descending, then shard index.
func (a ranked) before(b ranked) bool {
	return a.score > b.score || (a.score == b.score && a.k < b.k)
}

// ranks scores the shards ks for runner r.
func (p *placer) ranks(r int, ks []int) []ranked {
	rs := make([]ranked, len(ks))
	for i, k := range ks {
		p.buf = appendKey(slices.Grow(p.buf[:0], p.keyCap), p.group, k)
		rs[i] = ranked{k, p.exact(p.buf, r)}
	}
	return rs
}

func shardsOf(rs []ranked) []int {
	out := make([]int, len(rs))
	for i, x := range rs {
		out[i] = x.k
	}
	return out
}

// selectFirst reorders a so that a[:t] are its t first elements by before
// (quickselect, median-of-three pivots: the scores are hashes, so no input
// makes it quadratic by design).
func selectFirst(a []ranked, t int) {
	lo, hi := 0, len(a) // the boundary t lies in [lo, hi]
	for hi-lo > 1 && lo < t && t < hi {
		mid := lo + (hi-lo)/2
		// Median of a[lo], a[mid], a[hi-1] into a[hi-1], the pivot.
		if a[mid].before(a[lo]) {
			a[mid], a[lo] = a[lo], a[mid]
		}
		if a[hi-1].before(a[lo]) {
			a[hi-1], a[lo] = a[lo], a[hi-1]
		}
		if a[mid].before(a[hi-1]) {
			a[mid], a[hi-1] = a[hi-1], a[mid]
		}
		pivot, store := a[hi-1], lo
		for i := lo; i < hi-1; i++ {
			if a[i].before(pivot) {
				a[i], a[store] = a[store], a[i]
				store++
			}
		}
		a[store], a[hi-1] = a[hi-1], a[store]
		// a[:store] are before the pivot, now at store, a[store+1:] after.
		switch {
		case store < t:
			lo = store + 1
		default:
			hi = store
		}
	}
}
