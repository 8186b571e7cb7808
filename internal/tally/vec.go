package tally

import (
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// series holds the values of one metric name by label values, made on
// first use. T is *Counter or *Histogram.
type series[T any] struct {
	desc     *prometheus.Desc
	labels   int
	newValue func() T
	mu       sync.RWMutex
	list     []labelled[T]
	index    map[string]T
}

type labelled[T any] struct {
	values []string
	v      T
}

func newSeries[T any](name, help string, labels []string, constLabels prometheus.Labels, newValue func() T) series[T] {
	return series[T]{desc: prometheus.NewDesc(name, help, labels, constLabels), labels: len(labels), newValue: newValue, index: map[string]T{}}
}

// with returns the value of the label values, making it the first time.
// It panics when the number of values is not the number of labels, a
// programming error, as prometheus's WithLabelValues does.
func (s *series[T]) with(values []string) T {
	if len(values) != s.labels {
		panic(fmt.Sprintf("tally: %d label values for %d labels", len(values), s.labels))
	}
	key := strings.Join(values, "\xff")
	s.mu.RLock()
	v, ok := s.index[key]
	s.mu.RUnlock()
	if ok {
		return v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.index[key]; ok {
		return v
	}
	v = s.newValue()
	s.index[key] = v
	s.list = append(s.list, labelled[T]{values: append([]string(nil), values...), v: v})
	return v
}

// each calls f with every series made so far.
func (s *series[T]) each(f func(values []string, v T)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, l := range s.list {
		f(l.values, l.v)
	}
}

// CounterVec is a collector of counters that share a name and differ by
// label values: a prometheus.CounterVec whose series are made up front.
type CounterVec struct{ s series[*Counter] }

// NewCounterVec returns a collector of the counters opts names, by the
// labels.
func NewCounterVec(opts prometheus.CounterOpts, labels []string) *CounterVec {
	name := prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name)
	return &CounterVec{s: newSeries(name, opts.Help, labels, opts.ConstLabels, NewCounter)}
}

// With returns the counter of the label values, making it (at 0, scraped
// from now on) the first time. Hold on to it: With looks the values up.
func (v *CounterVec) With(values ...string) *Counter { return v.s.with(values) }

// Describe implements prometheus.Collector.
func (v *CounterVec) Describe(ch chan<- *prometheus.Desc) { ch <- v.s.desc }

// Collect implements prometheus.Collector.
func (v *CounterVec) Collect(ch chan<- prometheus.Metric) {
	v.s.each(func(values []string, c *Counter) {
		ch <- prometheus.MustNewConstMetric(v.s.desc, prometheus.CounterValue, float64(c.Value()), values...)
	})
}

// HistogramVec is a collector of histograms that share a name and buckets
// and differ by label values: a prometheus.HistogramVec whose series are
// made up front.
type HistogramVec struct{ s series[*Histogram] }

// NewHistogramVec returns a collector of the histograms opts names (with
// opts.Buckets, or prometheus.DefBuckets when nil), by the labels.
func NewHistogramVec(opts prometheus.HistogramOpts, labels []string) *HistogramVec {
	name := prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name)
	buckets := opts.Buckets
	if buckets == nil {
		buckets = prometheus.DefBuckets
	}
	return &HistogramVec{s: newSeries(name, opts.Help, labels, opts.ConstLabels, func() *Histogram { return NewHistogram(buckets) })}
}

// With returns the histogram of the label values, making it the first
// time; see CounterVec.With.
func (v *HistogramVec) With(values ...string) *Histogram { return v.s.with(values) }

// Describe implements prometheus.Collector.
func (v *HistogramVec) Describe(ch chan<- *prometheus.Desc) { ch <- v.s.desc }

// Collect implements prometheus.Collector.
func (v *HistogramVec) Collect(ch chan<- prometheus.Metric) {
	v.s.each(func(values []string, h *Histogram) {
		count, sum, buckets := h.snapshot()
		ch <- prometheus.MustNewConstHistogram(v.s.desc, count, sum, buckets, values...)
	})
}
