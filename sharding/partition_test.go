package sharding

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// TestPartition cuts one runner off from etcd: it must detach before its
// lease deadline minus the margin with every shard context cancelled, its
// shards must be re-owned by the others only after its lease expired, and it
// must come back under a new lease once healed.
func TestPartition(t *testing.T) {
	testenv.CheckLeaks(t)
	cfg := testConfig()
	c := newCluster(t, 24, cfg)
	smp := c.sample()
	a := c.start("a", 1)
	c.start("b", 1)
	c.start("c", 1)
	before := c.waitConverged(c.members(), 15*time.Second)
	var shardsOfA []storage.ShardID
	for s, r := range before {
		if r == "a" {
			shardsOfA = append(shardsOfA, s)
		}
	}
	if len(shardsOfA) == 0 {
		t.Fatal("runner a owns nothing")
	}
	ctxsOfA := map[storage.ShardID]context.Context{}
	for _, o := range a.mgr.Owned() {
		ctxsOfA[o.Shard] = o.Ctx
	}
	// At the detach transition, every entity context of a must already be
	// cancelled.
	liveAtDetach := make(chan int, 4)
	a.mgr.Machine().Subscribe(func(tr detachment.Transition) {
		if tr.Kind != detachment.Detached {
			return
		}
		live := 0
		for _, ctx := range ctxsOfA {
			if ctx.Err() == nil {
				live++
			}
		}
		liveAtDetach <- live
	})
	leaseA := a.mgr.Status().LeaseID

	cutAt := time.Now()
	a.proxy.SetMode(testenv.Blackhole)
	select {
	case live := <-liveAtDetach:
		if live != 0 {
			t.Fatalf("%d of a's shard contexts still live when it detached", live)
		}
	case <-time.After(3 * cfg.LeaseTTL):
		t.Fatal("partitioned runner never detached")
	}
	det := a.transitionsOf(detachment.Detached)[0]
	margin := cfg.Detachment.DetachMargin
	if cutoff := det.Deadline.Add(-margin); det.At.After(cutoff) {
		t.Fatalf("detached at %v, after the deadline %v minus the margin %s", det.At, det.Deadline, margin)
	}
	t.Logf("partitioned runner detached %s after the cut (%s), %s before its cutoff", det.At.Sub(cutAt), det.Reason, det.Deadline.Add(-margin).Sub(det.At))
	if st := a.mgr.Status(); st.Attached || len(st.Owned) != 0 {
		t.Fatalf("detached runner reports attached=%v with %d owned shards", st.Attached, len(st.Owned))
	}

	rest := []*testRunner{c.runner("b"), c.runner("c")}
	// b and c take a's shards once its lease has expired in etcd.
	testenv.WaitFor(t, "b and c to own a's shards", 10*cfg.LeaseTTL, func() bool {
		own, _ := c.ownership(rest)
		for _, s := range shardsOfA {
			if own[s] == "" {
				return false
			}
		}
		return true
	})
	for _, sp := range c.ledger.AcquiredAfter(cutAt) {
		if sp.Runner == "a" {
			continue
		}
		// a's lease lives at least until the deadline it computed from its
		// last confirmed keep-alive; nobody may own its shards before.
		if sp.Start.Before(det.Deadline) {
			t.Errorf("%s took shard %s at %v, before a's lease deadline %v", sp.Runner, sp.Shard, sp.Start, det.Deadline)
		}
	}

	// Heal: a finds its lease gone, registers anew, recovers and rejoins.
	a.proxy.SetMode(testenv.Pass)
	c.waitConverged(c.members(), 20*time.Second)
	if got := a.mgr.Status().LeaseID; got == leaseA {
		t.Fatalf("a rejoined under its old lease %x", leaseA)
	}
	if n := len(a.transitionsOf(detachment.Attached)); n < 2 {
		t.Fatalf("a attached %d times, want a re-attachment", n)
	}
	if v := testutil.ToFloat64(a.mgr.metrics.leaseLost); v < 1 {
		t.Fatalf("lease_lost_total = %v", v)
	}
	smp.finish(t)
	c.ledger.checkNoOverlap(t)
}

// TestObserveModeNeverInterrupts: in observe mode a partition is reported as
// would-detach, and nothing is interrupted while the lease lives.
func TestObserveModeNeverInterrupts(t *testing.T) {
	cfg := testConfig()
	cfg.Detachment.Mode = detachment.ModeObserve
	cfg.LeaseTTL = 6 * time.Second
	cfg.KeepAliveInterval = time.Second
	cfg.KeepAliveTimeout = 300 * time.Millisecond
	cfg.Detachment.DetachMargin = 2 * time.Second
	cfg.LockRefreshInterval = time.Second
	c := newCluster(t, 4, cfg)
	r := c.start("observer", 1)
	c.waitConverged(c.members(), 10*time.Second)
	owned := r.mgr.Owned()
	r.proxy.SetMode(testenv.Blackhole)
	testenv.WaitFor(t, "would-detach", 10*time.Second, func() bool {
		return testutil.ToFloat64(r.mgr.metrics.wouldDetach.WithLabelValues(string(detachment.ReasonKeepAliveFailures))) >= 1
	})
	for _, o := range owned {
		if o.Ctx.Err() != nil {
			t.Fatalf("observe mode cancelled shard %s", o.Shard)
		}
	}
	if st := r.mgr.Status(); !st.Attached || len(st.Owned) != len(owned) {
		t.Fatalf("observe mode: attached=%v owned=%d", st.Attached, len(st.Owned))
	}
	if v := testutil.ToFloat64(r.mgr.metrics.detachments.WithLabelValues(string(detachment.ReasonKeepAliveFailures))); v != 0 {
		t.Fatalf("detachments_total = %v in observe mode", v)
	}
	r.proxy.SetMode(testenv.Pass)
}

// TestRecoveryBeforeExpiry: a partition healed before the lease expires ends
// with the runner re-attaching after the recovery window and resuming its
// shards under the same lease and epochs, without anyone else taking them.
func TestRecoveryBeforeExpiry(t *testing.T) {
	testenv.CheckLeaks(t)
	cfg := testConfig()
	cfg.LeaseTTL = 8 * time.Second
	cfg.KeepAliveInterval = 2 * time.Second
	cfg.KeepAliveTimeout = time.Second
	cfg.Detachment.DetachMargin = 2500 * time.Millisecond
	cfg.LockRefreshInterval = 2 * time.Second
	c := newCluster(t, 16, cfg)
	smp := c.sample()
	a := c.start("a", 1)
	c.start("b", 1)
	c.waitConverged(c.members(), 15*time.Second)
	lease := a.mgr.Status().LeaseID
	epochs := map[storage.ShardID]int64{}
	for _, o := range a.mgr.Owned() {
		epochs[o.Shard] = o.Epoch
	}
	cutAt := time.Now()
	a.proxy.SetMode(testenv.Blackhole)
	testenv.WaitFor(t, "detachment", cfg.LeaseTTL, func() bool { return len(a.transitionsOf(detachment.Detached)) == 1 })
	det := a.transitionsOf(detachment.Detached)[0]
	if det.At.After(det.Deadline.Add(-cfg.Detachment.DetachMargin)) {
		t.Fatalf("detached at %v, after deadline %v - margin", det.At, det.Deadline)
	}
	healAt := time.Now()
	if healAt.After(det.Deadline) {
		t.Fatalf("detachment came too late to heal before expiry (deadline %v)", det.Deadline)
	}
	a.proxy.SetMode(testenv.Pass)
	testenv.WaitFor(t, "re-attachment", 2*cfg.LeaseTTL, func() bool { return len(a.transitionsOf(detachment.Attached)) == 2 })
	att := a.transitionsOf(detachment.Attached)[1]
	if gap := att.At.Sub(healAt); gap < cfg.Detachment.RecoverWindow {
		t.Fatalf("re-attached %s after healing, inside the %s recovery window", gap, cfg.Detachment.RecoverWindow)
	}
	c.waitConverged(c.members(), 10*time.Second)
	st := a.mgr.Status()
	if st.LeaseID != lease {
		t.Fatalf("lease changed from %x to %x: the lease should have survived", lease, st.LeaseID)
	}
	for _, o := range st.Owned {
		if epochs[o.Shard] != o.Epoch {
			t.Fatalf("shard %s resumed at epoch %d, had %d", o.Shard, o.Epoch, epochs[o.Shard])
		}
	}
	for _, sp := range c.ledger.AcquiredAfter(cutAt) {
		if sp.Runner == "b" {
			t.Fatalf("b acquired %s during a's recoverable partition", sp.Shard)
		}
	}
	t.Logf("detached %s after the cut (%s); re-attached %s after healing", det.At.Sub(cutAt), det.Reason, att.At.Sub(healAt))
	smp.finish(t)
	c.ledger.checkNoOverlap(t)
}

// TestDetachWhenLeaderUnreachable: a runner whose etcd member loses its
// leader sees its keep-alives fail at once (WithRequireLeader) and detaches
// for keep-alive failures, long before the lease deadline.
func TestDetachWhenLeaderUnreachable(t *testing.T) {
	members := testenv.NewEtcdCluster(t, 3)
	cfg := testConfig()
	cfg.LeaseTTL = 10 * time.Second
	cfg.KeepAliveInterval = time.Second
	cfg.KeepAliveTimeout = 3 * time.Second
	cfg.Detachment.DetachMargin = 3 * time.Second
	cfg.LockRefreshInterval = 3 * time.Second
	st, err := etcd.New(members[0].Client(t), etcd.WithPrefix(testenv.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	meta := storage.ClusterMeta{Shards: 4, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName}
	m, err := New(st, storage.RunnerInfo{ID: "r", Weight: 1}, meta, cfg, WithLogger(testLogger(t, "r")))
	if err != nil {
		t.Fatal(err)
	}
	detached := make(chan detachment.Transition, 1)
	m.Machine().Subscribe(func(tr detachment.Transition) {
		if tr.Kind == detachment.Detached {
			select {
			case detached <- tr:
			default:
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	testenv.WaitFor(t, "shards owned", 10*time.Second, func() bool { return len(m.Owned()) == 4 })
	lostAt := time.Now()
	members[1].Close()
	members[2].Close()
	select {
	case tr := <-detached:
		if tr.Reason != detachment.ReasonKeepAliveFailures && tr.Reason != detachment.ReasonStorageError {
			t.Fatalf("detached for %s, want a fast path (keep-alive failures)", tr.Reason)
		}
		if lag := tr.Deadline.Sub(tr.At); lag < cfg.Detachment.DetachMargin {
			t.Fatalf("detached only %s before the deadline: the fast path did not work", lag)
		}
		t.Logf("detached %s after quorum loss (%s), %s before the deadline", tr.At.Sub(lostAt), tr.Reason, tr.Deadline.Sub(tr.At))
	case <-time.After(cfg.LeaseTTL):
		t.Fatal("runner never detached after its member lost the leader")
	}
	if n := len(m.Owned()); n != 0 {
		t.Fatalf("%d shards owned after detaching", n)
	}
}
