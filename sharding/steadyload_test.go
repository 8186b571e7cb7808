package sharding

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

// steadyLoadBound is the target bound on an idle runner's etcd traffic at
// the default TTL: requests per minute, a keep-alive counting as one.
const steadyLoadBound = 30

// TestSteadyEtcdLoad counts, at etcd itself (its gRPC server metrics), the
// requests one idle runner makes in a minute at the default settings, and
// holds them to steadyLoadBound. It runs every cadence scaled down by the
// same factor (a 2s lease: keep-alives, lock refresh and the safety pass
// all five times as often) over a window scaled alike, so the count in the
// window is the count of a default minute. The bound is a count, not a
// timing: a runner that makes more requests per lease period fails however
// fast the machine is.
func TestSteadyEtcdLoad(t *testing.T) {
	testenv.CheckLeaks(t)
	def := DefaultConfig()
	const scale = 5
	cfg := DefaultConfigFor(def.LeaseTTL / scale)
	cfg.RebalanceInterval = def.RebalanceInterval / scale
	window := time.Minute / scale

	c := newCluster(t, 64, cfg)
	r := c.start("idle", 1)
	c.waitConverged(c.members(), 15*time.Second)
	// Let the start-up calls (registration, acquisition, first listing)
	// drain out of the window: one safety pass after converging.
	settle := time.NewTimer(cfg.RebalanceInterval)
	<-settle.C

	before := testenv.EtcdCallsNow(t)
	start := time.Now()
	// A measurement window, not a synchronisation: the runner is idle and
	// the counts are rates over it.
	measure := time.NewTimer(window)
	<-measure.C
	calls := testenv.EtcdCallsNow(t).Since(before)
	elapsed := time.Since(start)

	if st := r.mgr.Status(); !st.Attached || len(st.Owned) != 64 {
		t.Fatalf("runner not steady during the window: attached=%v owned=%d", st.Attached, len(st.Owned))
	}
	perMinute := calls.Requests() * float64(window) / float64(elapsed)
	t.Logf("per idle runner per default minute (window %s at 1/%d scale): %.1f requests; %s", elapsed.Round(time.Millisecond), scale, perMinute, calls)
	if perMinute > steadyLoadBound {
		t.Fatalf("%.1f etcd requests per idle runner per minute, want ≤ %d (%s)", perMinute, steadyLoadBound, calls)
	}
	// A healthy runner renews on the stream it has: a keep-alive stream
	// opened in the window means one was dropped without a failure.
	if opened := calls["LeaseKeepAlive"].Started; opened > 0 {
		t.Fatalf("%g keep-alive streams opened while healthy, want the one stream reused (%s)", opened, calls)
	}
}
