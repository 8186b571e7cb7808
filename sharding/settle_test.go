package sharding

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/storage"
)

// TestColdStartSettles: many runners started together (over half the
// quiet period, as processes boot) lock every shard once, each by its
// final owner, and reach the balanced assignment within a bound that does
// not grow with their number: the first acquisition waits for the
// membership to settle (settle.go), so no runner locks from a view that
// lacks the others and then hands the shards over. (Without the wait,
// StartupSettleMax < 0, the first runners lock shards the later ones then
// take over, and the test fails on shards locked twice.)
//
// The bound follows the mechanism. Once the last runner is registered
// (seen here as its lease), each runner's view shows it within one stream
// delivery, every runner settles StartupQuiet later, and each then locks
// its share in one AcquireShards call, whose transactions run together,
// each bounded by the store's request timeout; the others see the locks
// within one more stream delivery. A stream delivery is bounded here by
// the request timeout too (a generous bound for a local etcd): so
// registered + StartupQuiet + 3 × request timeout.
func TestColdStartSettles(t *testing.T) {
	testenv.CheckLeaks(t)
	const runners, shards = 10, 40
	// The product's lease and settle: the runners of this test register
	// within a few hundred milliseconds of each other even under -race on
	// a loaded machine, and a 10s lease keeps a keep-alive that is late
	// under that load from detaching a runner (the test's 2s one leaves
	// 333ms per call), which would add its recovery to the bound.
	cfg := DefaultConfigFor(10 * time.Second)
	cfg.RebalanceDebounce = 50 * time.Millisecond
	cfg.StartupQuiet = time.Second // the default's, with the default debounce
	cfg.InterruptTimeout = time.Second
	cfg.ProbeInterval = 100 * time.Millisecond
	// The safety pass must not be what converges the cluster.
	cfg.RebalanceInterval = time.Minute
	const requestTimeout = time.Second // the test stores' (cluster.storeVia)
	c := newCluster(t, shards, cfg)
	smp := c.sample()

	ids := make([]string, runners)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%02d", i+1)
	}
	// Start them as processes started together come up: every store
	// connected and every Manager made first, then the Runs one every
	// spread/runners, so that the registrations spread over about half
	// the quiet period (a deploy's processes boot over a second or so).
	// Started all in one instant, runners register before any of them
	// reads the membership, and even runners that do not wait would lock
	// from the full view.
	starts := make([]func() *testRunner, runners)
	for i, id := range ids {
		starts[i] = c.prepare(id, 1, nil)
	}
	spread := cfg.StartupQuiet / 2
	tick := time.NewTicker(spread / runners)
	for _, start := range starts {
		<-tick.C // the scenario's pacing, not a synchronisation
		start()
	}
	tick.Stop()
	rs := c.members()

	var registered time.Time
	// Registering is three calls (the meta read and check, the lease and
	// record), each within the request timeout; this wait is set-up, not
	// what the test measures, so its bound is loose.
	err := harness.Await(context.Background(), 10*requestTimeout, 5*time.Millisecond, func() (bool, string, error) {
		n := 0
		for _, r := range rs {
			if r.mgr.Status().LeaseID != 0 {
				n++
			}
		}
		return n == runners, fmt.Sprintf("%d/%d runners registered", n, runners), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	registered = time.Now()
	bound := cfg.StartupQuiet + 3*requestTimeout
	c.waitConverged(rs, time.Until(registered.Add(bound)))
	t.Logf("balanced %s after the last registration (bound %s)", time.Since(registered).Round(time.Millisecond), bound)

	// Each shard was locked once: no runner took shards from a partial
	// view only to hand them over. (A lock is a shard and an epoch: an
	// ownership resumed under the same lock after a detachment is not a
	// new one.)
	spans := c.ledger.Spans()
	locks := map[storage.ShardID]map[int64]bool{}
	for _, sp := range spans {
		if locks[sp.Shard] == nil {
			locks[sp.Shard] = map[int64]bool{}
		}
		locks[sp.Shard][sp.Epoch] = true
	}
	for s, epochs := range locks {
		if len(epochs) != 1 {
			for _, sp := range spans {
				if sp.Shard == s {
					t.Logf("%s held shard %s (epoch %d) from %s", sp.Runner, sp.Shard, sp.Epoch, sp.Start.Format("15:04:05.000"))
				}
			}
			t.Errorf("shard %s was locked %d times; want once, by its final owner", s, len(epochs))
		}
	}
	if len(locks) != shards {
		t.Errorf("%d shards locked; want %d", len(locks), shards)
	}
	for _, r := range rs {
		if n := testutil.ToFloat64(r.mgr.metrics.retryWindowExhausts); n != 0 {
			t.Errorf("runner %s: %v acquire retry windows exhausted; want none", r.id, n)
		}
	}
	smp.finish(t)
	c.ledger.checkNoOverlap(t)
}

// TestPendingWaitsOnTheStream: a runner that joins a cluster whose shards
// are all held waits for its shards on the membership stream, not on
// retries: none is polled while the stream is in sync, no retry window is
// exhausted however short, and each shard is taken as its holder releases
// it — with the safety pass an hour away, so nothing else could move them.
func TestPendingWaitsOnTheStream(t *testing.T) {
	testenv.CheckLeaks(t)
	cfg := testConfig()
	cfg.AcquireRetryWindow = 20 * time.Millisecond // would run out during any hand-over
	// No start-up settle: r2 tries its shards while r1 still holds them.
	cfg.StartupSettleMax = -1
	cfg.RebalanceInterval = time.Hour
	c := newCluster(t, 48, cfg)
	smp := c.sample()
	c.start("r1", 1)
	c.waitConverged(c.members(), 15*time.Second)
	joined := time.Now()
	r2 := c.start("r2", 1)
	// The join's bound: r1 rebalances (RebalanceDebounce after the join) and releases r2's
	// half one shard at a time, each within InterruptTimeout (the
	// handler's hand-over) and a request timeout (the delete); r2 takes
	// each on its deletion.
	bound := cfg.RebalanceDebounce + 24*(cfg.InterruptTimeout+time.Second) + time.Second
	c.waitConverged(c.members(), time.Until(joined.Add(bound)))
	if n := testutil.ToFloat64(r2.mgr.metrics.retryWindowExhausts); n != 0 {
		t.Errorf("r2: %v acquire retry windows exhausted; want none (the stream was in sync)", n)
	}
	if n := testutil.ToFloat64(r2.mgr.metrics.acquireRetries); n != 0 {
		t.Errorf("r2: %v acquire retries; want none while the stream shows the locks held", n)
	}
	smp.finish(t)
	c.ledger.checkNoOverlap(t)
}

// TestJoinDoesNotSettle: a runner joining a running cluster (its first
// view shows shards locked by another) takes its share as the holder hands
// it over, without the start-up settle: waiting would leave the shards
// its holder releases unowned for the quiet period. Its quiet period here
// is a minute, so the join's bound (as TestPendingWaitsOnTheStream's)
// could not be met if it waited.
func TestJoinDoesNotSettle(t *testing.T) {
	testenv.CheckLeaks(t)
	cfg := testConfig()
	cfg.RebalanceInterval = time.Hour
	c := newCluster(t, 8, cfg)
	smp := c.sample()
	c.start("r1", 1)
	c.waitConverged(c.members(), 15*time.Second)
	c.cfg.StartupQuiet, c.cfg.StartupSettleMax = time.Minute, time.Minute
	joined := time.Now()
	c.start("r2", 1)
	// r1 rebalances RebalanceDebounce after the join and releases r2's
	// half one shard at a time, each within InterruptTimeout and a
	// request timeout; r2 takes each on its deletion.
	bound := cfg.RebalanceDebounce + 4*(cfg.InterruptTimeout+time.Second) + time.Second
	c.waitConverged(c.members(), time.Until(joined.Add(bound)))
	t.Logf("r2 holds its share %s after starting (bound %s; its quiet period %s)", time.Since(joined).Round(time.Millisecond), bound, c.cfg.StartupQuiet)
	smp.finish(t)
	c.ledger.checkNoOverlap(t)
}
