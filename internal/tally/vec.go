package tally

import (
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// CounterVec is a collector of counters that share a name and differ by
// label values: a prometheus.CounterVec whose series are made up front.
type CounterVec struct {
	desc   *prometheus.Desc
	labels int
	mu     sync.RWMutex
	series []counterSeries
	index  map[string]*Counter
}

type counterSeries struct {
	values []string
	c      *Counter
}

// NewCounterVec returns a collector of the counters opts names, by the
// labels.
func NewCounterVec(opts prometheus.CounterOpts, labels []string) *CounterVec {
	name := prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name)
	return &CounterVec{desc: prometheus.NewDesc(name, opts.Help, labels, opts.ConstLabels), labels: len(labels), index: map[string]*Counter{}}
}

// With returns the counter of the label values, making it (at 0, scraped
// from now on) the first time. Hold on to it: With looks the values up.
// It panics when the number of values is not the number of labels, a
// programming error, as prometheus.CounterVec.WithLabelValues does.
func (v *CounterVec) With(values ...string) *Counter {
	key := seriesKey(v.labels, values)
	v.mu.RLock()
	c, ok := v.index[key]
	v.mu.RUnlock()
	if ok {
		return c
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.index[key]; ok {
		return c
	}
	c = NewCounter()
	v.index[key] = c
	v.series = append(v.series, counterSeries{values: append([]string(nil), values...), c: c})
	return c
}

// Describe implements prometheus.Collector.
func (v *CounterVec) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect implements prometheus.Collector.
func (v *CounterVec) Collect(ch chan<- prometheus.Metric) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, s := range v.series {
		ch <- prometheus.MustNewConstMetric(v.desc, prometheus.CounterValue, float64(s.c.Value()), s.values...)
	}
}

// HistogramVec is a collector of histograms that share a name and buckets
// and differ by label values: a prometheus.HistogramVec whose series are
// made up front.
type HistogramVec struct {
	desc    *prometheus.Desc
	labels  int
	buckets []float64
	mu      sync.RWMutex
	series  []histogramSeries
	index   map[string]*Histogram
}

type histogramSeries struct {
	values []string
	h      *Histogram
}

// NewHistogramVec returns a collector of the histograms opts names (with
// opts.Buckets, or prometheus.DefBuckets when nil), by the labels.
func NewHistogramVec(opts prometheus.HistogramOpts, labels []string) *HistogramVec {
	name := prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name)
	buckets := opts.Buckets
	if buckets == nil {
		buckets = prometheus.DefBuckets
	}
	return &HistogramVec{desc: prometheus.NewDesc(name, opts.Help, labels, opts.ConstLabels), labels: len(labels),
		buckets: buckets, index: map[string]*Histogram{}}
}

// With returns the histogram of the label values, making it the first
// time; see CounterVec.With.
func (v *HistogramVec) With(values ...string) *Histogram {
	key := seriesKey(v.labels, values)
	v.mu.RLock()
	h, ok := v.index[key]
	v.mu.RUnlock()
	if ok {
		return h
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if h, ok := v.index[key]; ok {
		return h
	}
	h = NewHistogram(v.buckets)
	v.index[key] = h
	v.series = append(v.series, histogramSeries{values: append([]string(nil), values...), h: h})
	return h
}

// Describe implements prometheus.Collector.
func (v *HistogramVec) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect implements prometheus.Collector.
func (v *HistogramVec) Collect(ch chan<- prometheus.Metric) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, s := range v.series {
		count, sum, buckets := s.h.snapshot()
		ch <- prometheus.MustNewConstHistogram(v.desc, count, sum, buckets, s.values...)
	}
}

// seriesKey joins label values into a map key; it panics on a wrong count.
func seriesKey(labels int, values []string) string {
	if len(values) != labels {
		panic(fmt.Sprintf("tally: %d label values for %d labels", len(values), labels))
	}
	return strings.Join(values, "\xff")
}
