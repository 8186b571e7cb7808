package tally

import (
	"sort"
	"sync/atomic"
)

// Histogram counts observations in fixed buckets, kept in stripes.
type Histogram struct {
	upper   []float64 // the buckets' upper bounds, ascending; +Inf implied
	stride  int       // words per stripe: one per bucket, +Inf, and the sum
	words   []atomic.Uint64
	stripes int
}

// NewHistogram returns an empty histogram over the upper bounds buckets
// (ascending, as prometheus.HistogramOpts.Buckets; +Inf is implied).
func NewHistogram(buckets []float64) *Histogram {
	upper := append([]float64(nil), buckets...)
	sort.Float64s(upper)
	words := len(upper) + 2
	// Round each stripe up to whole cache lines, so that two stripes never
	// share one.
	per := cacheLine / 8
	stride := (words + per - 1) / per * per
	return &Histogram{upper: upper, stride: stride, words: make([]atomic.Uint64, stride*stripeCount), stripes: stripeCount}
}

// Observe adds one observation of v.
func (h *Histogram) Observe(v float64) {
	b := sort.SearchFloat64s(h.upper, v) // the first bound ≥ v; len(upper): +Inf
	base := pick() * h.stride
	h.words[base+b].Add(1)
	addFloat(&h.words[base+len(h.upper)+1], v)
}

// snapshot returns the observation count, their sum and the cumulative
// count of each upper bound.
func (h *Histogram) snapshot() (count uint64, sum float64, cumulative map[float64]uint64) {
	perBucket := make([]uint64, len(h.upper)+1)
	for s := range h.stripes {
		base := s * h.stride
		for b := range perBucket {
			perBucket[b] += h.words[base+b].Load()
		}
		sum += floatOf(h.words[base+len(h.upper)+1].Load())
	}
	cumulative = make(map[float64]uint64, len(h.upper))
	for b, up := range h.upper {
		count += perBucket[b]
		cumulative[up] = count
	}
	count += perBucket[len(h.upper)]
	return count, sum, cumulative
}
