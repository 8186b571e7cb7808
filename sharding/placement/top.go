package placement

import "math"

// A shard's best runners, kept for the start and the walk (see start and
// maxTop).

// insertTop inserts bound c of runner r into the size lowest bounds tb
// (ascending, runners tr), keeping at most len(tb); equal bounds keep
// runner order, as c comes after any kept one of the same row. It returns
// the new size.
func insertTop(tb []float32, tr []int32, size int, c float32, r int) int {
	i := size
	if size == len(tb) {
		i--
	} else {
		size++
	}
	for ; i > 0 && tb[i-1] > c; i-- {
		tb[i], tr[i] = tb[i-1], tr[i-1]
	}
	tb[i], tr[i] = c, int32(r)
	return size
}

// bestTop is best for shard k (key: its hashed prefix "<group>/<k>/"),
// from its kept bounds when they decide it, from its whole row, hashed
// again into *row, when they do not. slack < 0 makes every runner
// available (the start).
//
// The kept bounds are the topK lowest, so every other runner's bound is at
// least the last kept one. Among the available kept runners, those whose
// bounds do not prove them below the best exact score found so far are
// scored exactly, as best does over a whole row. If the last kept bound
// also proves every runner beyond it below the best score found, that is
// the shard's best available pair, the one best would find: the highest
// score, ties to the lowest index, whatever the order the candidates come
// in, since a bound never excludes a tie. Otherwise, or when no kept
// runner is available, the whole row decides.
func (p *placer) bestTop(k, slack int, key []byte, row *[]float32) (int, float64) {
	K := p.topK
	tb, tr := p.topB[k*K:(k+1)*K], p.topR[k*K:(k+1)*K]
	b := -1
	var bs float64
	for j, c := range tb {
		if b >= 0 && boundBelow(c, bs) {
			break // so are all the later ones, whose bounds are higher
		}
		r := int(tr[j])
		if slack >= 0 && !p.available(r, slack) {
			continue
		}
		if s := p.exact(key, r); b < 0 || s > bs || (s == bs && r < b) {
			b, bs = r, s
		}
	}
	if b >= 0 && (K == len(p.ids) || boundBelow(tb[K-1], bs)) {
		return b, bs
	}
	*row = resizeFloat32s(*row, len(p.ids))
	for r, id := range p.ids {
		(*row)[r] = costBound(p.invW[r], hashBytes(append(key, id...)))
	}
	return p.best(*row, key, -1, slack)
}

// boundCutoff returns an m such that every hash h with h>>12 ≤ m has a
// costBound of at least thr, for any runner: costBound falls as h>>12
// grows (1 - u shrinks, and each rounding is monotone), and it is lowest
// for the runners of the highest weight, whose 1/w is 1 (every other 1/w is
// above 1). So a row's hashes at or below the cutoff cannot enter its kept
// bounds, and most of a row is rejected on the hash alone, without the
// float arithmetic. The cutoff is conservative: a hash above it is still
// checked with its exact bound. -1 rejects nothing.
func boundCutoff(thr float32) int64 {
	if math.IsInf(float64(thr), 1) || !(thr > 0) {
		return -1
	}
	// costBound(1, m<<12) ≈ (2^52 - m) × 2^-52 where it equals thr.
	est := (1-float64(thr)/(1-0x1p-22))*0x1p52 - 2
	if est < 0 {
		return -1
	}
	m := min(int64(est), 1<<52-1)
	for m >= 0 && costBound(1, uint64(m)<<12) < thr {
		m -= m>>20 + 1
	}
	return m
}

func resizeFloat32s(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func resizeInt32s(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}
