package sharding

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// TestFreeShardTakenWhenSuccessorLeaves: a shard freed by a drained runner
// and meant for another successor is taken by this runner as soon as its
// view gives it the shard — here because that successor drains too before
// taking it — not at the next debounced rebalance (30 s away here).
//
// The runner under test is "b"; "f" and "d" are bare sessions driven by
// the test: d drains and releases its shards, b takes those meant for it,
// f takes nothing and then drains as well.
func TestFreeShardTakenWhenSuccessorLeaves(t *testing.T) {
	testenv.CheckLeaks(t)
	const shards = 8
	groups := []string{storage.DefaultGroup}
	all := []placement.Candidate{{ID: "b", Weight: 1}, {ID: "f", Weight: 1}, {ID: "d", Weight: 1}}
	start := placement.Assign(groups, shards, all)
	base := placement.Assignment{} // the holders once d's locks are gone
	for s, r := range start {
		if r != "d" {
			base[s] = r
		}
	}
	afterDrain := placement.Reassign(groups, shards, []placement.Candidate{{ID: "b", Weight: 1}, {ID: "f", Weight: 1}, {ID: "d", Weight: 0}}, base)
	var dShards, toB, toF []storage.ShardID
	for _, s := range start.ShardsOf("d") {
		dShards = append(dShards, s)
		if afterDrain[s] == "b" {
			toB = append(toB, s)
		} else {
			toF = append(toF, s)
		}
	}
	if len(toF) == 0 {
		t.Fatalf("d's shards %v all go to b: pick another layout", dShards)
	}
	t.Logf("d holds %v; after its drain b gets %v, f gets %v", dShards, toB, toF)

	cfg := testConfig()
	cfg.RebalanceDebounce = 30 * time.Second // only the membership stream can act in time
	cfg.RebalanceInterval = time.Minute
	c := newCluster(t, shards, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	session := func(id string) storage.Session {
		st := c.store()
		if _, err := st.EnsureMeta(ctx, c.Meta); err != nil {
			t.Fatal(err)
		}
		ss, err := st.Register(ctx, storage.RunnerInfo{ID: id, Weight: 1, Groups: groups, Version: "test"}, cfg.LeaseTTL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss.Close(context.Background()) })
		go storage.KeepAliveLoop(ctx, ss, storage.KeepAliveCadence{}, nil)
		return ss
	}
	acquire := func(ss storage.Session, want []storage.ShardID) {
		t.Helper()
		res, err := ss.AcquireShards(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Status != storage.Acquired {
				t.Fatalf("%s: acquiring %s: %s (held by %q, %v)", ss.RunnerID(), r.Shard, r.Status, r.Holder, r.Err)
			}
		}
	}
	drain := func(ss storage.Session) {
		t.Helper()
		if err := ss.UpdateRunner(ctx, storage.RunnerInfo{ID: ss.RunnerID(), Weight: 0, Groups: groups, Version: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	f, d := session("f"), session("d")
	acquire(f, start.ShardsOf("f"))
	acquire(d, dShards)
	b := c.start("b", 1)
	testenv.WaitFor(t, "b to own its share", 10*time.Second, func() bool {
		return slices.Equal(ownedShards(b), start.ShardsOf("b"))
	})

	drain(d)
	for _, s := range dShards {
		if err := d.ReleaseShard(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, "b to take the released shards meant for it", 5*time.Second, func() bool {
		owned := ownedShards(b)
		for _, s := range toB {
			if !slices.Contains(owned, s) {
				return false
			}
		}
		return true
	})
	for _, s := range toF {
		if slices.Contains(ownedShards(b), s) {
			t.Fatalf("b owns %s, which its view gives to f", s)
		}
	}
	drain(f)
	testenv.WaitFor(t, "b to take the free shards once f drained", 5*time.Second, func() bool {
		owned := ownedShards(b)
		for _, s := range toF {
			if !slices.Contains(owned, s) {
				return false
			}
		}
		return true
	})
	c.ledger.checkNoOverlap(t)
}

// ownedShards lists what r owns, sorted as placement.Assignment.ShardsOf.
func ownedShards(r *testRunner) []storage.ShardID {
	var out []storage.ShardID
	for _, o := range r.mgr.Owned() {
		out = append(out, o.Shard)
	}
	slices.SortFunc(out, cmpShard)
	return out
}
