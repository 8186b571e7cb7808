// Package tally owns Prometheus counters and histograms that many cores
// update at once on a hot path: each keeps its value in stripes, one cache
// line apart, and an update goes to a stripe picked at random, so that
// sixty-four goroutines counting the same series do not take turns on one
// cache line, as they do on a prometheus.Counter's single word. Reading
// (Collect, Value) sums the stripes.
//
// A Vec is a collector whose series are made up front (With), so that the
// hot path holds a *Counter or *Histogram and never looks up labels.
// Values are exact: every update lands in exactly one stripe. A scrape
// sums the stripes one after another, so a histogram's sum may miss an
// observation its count has (or the reverse) while it is being made; its
// count is always the sum of its buckets.
package tally
