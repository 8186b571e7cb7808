package tally

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

// TestSameAsPrometheus: the vectors expose exactly what client_golang's
// own CounterVec and HistogramVec expose for the same updates.
func TestSameAsPrometheus(t *testing.T) {
	copts := prometheus.CounterOpts{Namespace: "t", Name: "msgs_total", Help: "Messages."}
	// Powers of two and values in 2^-20 steps: every sum is exact in any
	// order, so that the stripes' order of summing cannot differ.
	hopts := prometheus.HistogramOpts{Namespace: "t", Name: "dur_seconds", Help: "Durations.", Buckets: prometheus.ExponentialBuckets(1.0/1024, 2, 12)}
	ours, theirs := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	oc, tc := NewCounterVec(copts, []string{"kind", "outcome"}), prometheus.NewCounterVec(copts, []string{"kind", "outcome"})
	oh, th := NewHistogramVec(hopts, []string{"path"}), prometheus.NewHistogramVec(hopts, []string{"path"})
	ours.MustRegister(oc, oh)
	theirs.MustRegister(tc, th)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		kind, outcome := []string{"call", "send"}[i%2], []string{"ok", "error", "refused"}[i%3]
		oc.With(kind, outcome).Inc()
		tc.WithLabelValues(kind, outcome).Inc()
		// Values on bucket bounds too: a bound is inclusive (le).
		v := float64(r.IntN(1<<22)) / (1 << 20)
		if i%7 == 0 {
			v = float64(int(1)<<(i%12)) / 1024
		}
		path := []string{"local", "remote"}[i%2]
		oh.With(path).Observe(v)
		th.WithLabelValues(path).Observe(v)
	}
	oh.With("idle") // made, never observed: exposed at 0
	th.WithLabelValues("idle")
	oc.With("send", "panic").Add(3)
	tc.WithLabelValues("send", "panic").Add(3)
	var want strings.Builder
	for _, name := range []string{"t_msgs_total", "t_dur_seconds"} {
		n, err := testutil.GatherAndCount(theirs, name)
		if err != nil || n == 0 {
			t.Fatalf("gathering %s from client_golang: %d series, %v", name, n, err)
		}
	}
	mfs, err := theirs.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&want, mf); err != nil {
			t.Fatal(err)
		}
	}
	if err := testutil.GatherAndCompare(ours, strings.NewReader(want.String())); err != nil {
		t.Fatalf("tally differs from client_golang:\n%v", err)
	}
}

// TestConcurrentExact: updates from many goroutines at once are all
// counted.
func TestConcurrentExact(t *testing.T) {
	c := NewCounter()
	h := NewHistogram([]float64{1, 2, 3})
	const goroutines, each = 16, 10000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				c.Inc()
				h.Observe(float64((g + i) % 4))
			}
		})
	}
	wg.Wait()
	if got := c.Value(); got != goroutines*each {
		t.Fatalf("counter = %d, want %d", got, goroutines*each)
	}
	count, sum, cum := h.snapshot()
	if count != goroutines*each || sum != goroutines*each/4*(0+1+2+3) {
		t.Fatalf("histogram count %d sum %g, want %d and %d", count, sum, goroutines*each, goroutines*each/4*6)
	}
	if cum[1] != goroutines*each/2 || cum[3] != goroutines*each {
		t.Fatalf("cumulative buckets %v", cum)
	}
}

func BenchmarkCounterParallel(b *testing.B) {
	c := NewCounter()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc()
		}
	})
}

func BenchmarkPrometheusCounterParallel(b *testing.B) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "c", Help: "c"})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc()
		}
	})
}

func BenchmarkHistogramParallel(b *testing.B) {
	h := NewHistogram(prometheus.ExponentialBuckets(50e-6, 2, 19))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Observe(3e-5)
		}
	})
}

func BenchmarkPrometheusHistogramParallel(b *testing.B) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Help: "h", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 19)})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Observe(3e-5)
		}
	})
}

func BenchmarkPick(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = pick()
		}
	})
}

// TestPickSpreads: goroutines alive at once land on several stripes.
func TestPickSpreads(t *testing.T) {
	const goroutines = 64
	seen := make(chan int, goroutines)
	var ready, hold sync.WaitGroup
	ready.Add(goroutines)
	hold.Add(1)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			ready.Done()
			hold.Wait() // all alive at once: no stack is reused
			seen <- pick()
		})
	}
	ready.Wait()
	hold.Done()
	wg.Wait()
	close(seen)
	stripes := map[int]bool{}
	for s := range seen {
		stripes[s] = true
	}
	if len(stripes) < stripeCount/2 {
		t.Fatalf("64 goroutines used %d of %d stripes", len(stripes), stripeCount)
	}
}
