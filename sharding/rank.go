package sharding

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

// keepBest returns the limit shards of ks that runner r scores highest
// (score descending, then shard index), in no particular order: the set
// step 6a keeps. A selection, not a sort: a runner that lost most of its
// share keeps a few of thousands.
func (p *placer) keepBest(r int, ks []int, limit int) []int {
	rs := p.ranks(r, ks)
	selectFirst(rs, limit)
	return shardsOf(rs[:limit])
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
