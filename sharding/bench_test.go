package sharding

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// quantile returns the q-quantile of ds (sorted in place).
func quantile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// BenchmarkDetachLatency partitions a runner from etcd once per iteration
// and reports how far before its cutoff (deadline - margin) it detached:
// detach time minus cutoff, as a median and a maximum (negative: early).
// Run with -benchtime 20x for 20 trials.
func BenchmarkDetachLatency(b *testing.B) {
	cfg := testConfig()
	var errs []time.Duration
	i := 0
	for b.Loop() {
		c := newClusterTB(b, 4, cfg)
		r := c.start("victim-"+strconv.Itoa(i), 1)
		i++
		c.waitConverged(c.members(), 10*time.Second)
		r.proxy.SetMode(testenv.Blackhole)
		testenv.WaitFor(b, "the partitioned runner to detach", 3*cfg.LeaseTTL, func() bool {
			return len(r.transitionsOf(detachment.Detached)) > 0
		})
		tr := r.transitionsOf(detachment.Detached)[0]
		errs = append(errs, tr.At.Sub(tr.Deadline.Add(-cfg.Detachment.DetachMargin)))
		r.proxy.SetMode(testenv.Pass)
		r.stop(c.t)
	}
	b.ReportMetric(float64(quantile(errs, 0.5).Microseconds())/1000, "median-ms-vs-cutoff")
	b.ReportMetric(float64(quantile(errs, 1).Microseconds())/1000, "max-ms-vs-cutoff")
}

// BenchmarkPlannedHandoff drains a runner of 128 shards to a successor per
// iteration and reports, per shard, the time from the handoff signal (the
// drainer's release) to the successor owning it. Run with -benchtime 2x for
// 256 shards.
func BenchmarkPlannedHandoff(b *testing.B) {
	cfg := testConfig()
	var gaps []time.Duration
	i := 0
	for b.Loop() {
		c := newClusterTB(b, 256, cfg)
		d := c.start("drainer-"+strconv.Itoa(i), 1)
		c.start("heir-"+strconv.Itoa(i), 1)
		i++
		c.waitConverged(c.members(), 20*time.Second)
		start := time.Now()
		if err := d.mgr.Drain(b.Context()); err != nil {
			b.Fatal(err)
		}
		testenv.WaitFor(b, "the heir to own everything", 20*time.Second, func() bool {
			own, ok := c.ownership(c.members())
			return ok && len(own) == 256 && !slices.ContainsFunc(d.mgr.Owned(), func(Ownership) bool { return true })
		})
		_, handovers := c.ledger.Handovers(d.id, string(LossReleased), start)
		gaps = append(gaps, handovers...)
		d.stop(c.t)
	}
	b.ReportMetric(float64(len(gaps)), "handoffs")
	b.ReportMetric(float64(quantile(gaps, 0.5).Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(quantile(gaps, 0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkCrashFailover kills a runner (cut from etcd, no revoke) per
// iteration and reports the time until its shards are all owned by the
// others, as a ratio to the lease TTL.
func BenchmarkCrashFailover(b *testing.B) {
	cfg := testConfig()
	var ratios []float64
	i := 0
	for b.Loop() {
		c := newClusterTB(b, 64, cfg)
		victim := c.start("victim-"+strconv.Itoa(i), 1)
		c.start("survivor-a-"+strconv.Itoa(i), 1)
		c.start("survivor-b-"+strconv.Itoa(i), 1)
		i++
		c.waitConverged(c.members(), 20*time.Second)
		var theirs []storage.ShardID
		for _, o := range victim.mgr.Owned() {
			theirs = append(theirs, o.Shard)
		}
		killed := time.Now()
		victim.proxy.SetMode(testenv.Blackhole) // a crash: nothing more reaches etcd
		survivors := slices.DeleteFunc(c.members(), func(r *testRunner) bool { return r == victim })
		testenv.WaitFor(b, "failover", 10*cfg.LeaseTTL, func() bool {
			own, _ := c.ownership(survivors)
			for _, s := range theirs {
				if own[s] == "" {
					return false
				}
			}
			return true
		})
		ratios = append(ratios, float64(time.Since(killed))/float64(cfg.LeaseTTL))
		victim.stop(c.t)
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "median-x-ttl")
	b.ReportMetric(ratios[len(ratios)-1], "max-x-ttl")
	b.ReportMetric(cfg.LeaseTTL.Seconds(), "ttl-s")
}
