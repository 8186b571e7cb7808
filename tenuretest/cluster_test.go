package tenuretest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/tenuretest"
)

func TestMain(m *testing.M) { tenuretest.Main(m) }

// TestClusterCallSurvivesOwnerLoss: on three runners, a call to a defined
// type succeeds; once the runner owning the entity stops, calls succeed
// again on its successor, which loads the entity's state from S3, and the
// cart's call to the ledger crosses runners. The same holds when the next
// owner is killed (its lease expires) and when the one after is
// partitioned from etcd; a restarted runner and a healed one take part
// again.
func TestClusterCallSurvivesOwnerLoss(t *testing.T) {
	start := time.Now()
	c := tenuretest.NewCluster(t, tenuretest.ClusterOptions{Runners: 3, Entities: []*entity.Definition{defineCart(&hooks{}), ledgerType}})
	t.Logf("cluster of 3 up in %s", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := c.Client()
	addOp := entity.Operation[Item, Summary]{Type: "cart", Name: "Add"}
	sum, err := addOp.Call(ctx, cl, "alice", Item{SKU: "a", Price: 3})
	if err != nil || sum != (Summary{Items: 1, Total: 3}) {
		t.Fatalf("Add: %+v, %v", sum, err)
	}
	owner := c.Owner("cart", "alice")
	if owner < 0 {
		t.Fatal("no runner owns cart/alice after a call to it")
	}
	stopped := time.Now()
	c.Stop(owner)
	var items []Item
	tenuretest.WaitFor(t, "a call to cart/alice after its owner stopped", 10*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		items, err = entity.Call[[]Item](cctx, cl, "cart", "alice", "List", nil)
		return err == nil
	})
	t.Logf("answered again %s after the stop began", time.Since(stopped).Round(time.Millisecond))
	if len(items) != 1 || items[0].SKU != "a" {
		t.Fatalf("items after the move: %+v", items)
	}
	if now := c.Owner("cart", "alice"); now == owner || now < 0 {
		t.Fatalf("owner after the stop: %d (was %d)", now, owner)
	}
	if sum, err := entity.Call[Summary](ctx, cl, "cart", "alice", "Checkout", nil); err != nil || sum.Total != 3 {
		t.Fatalf("Checkout: %+v, %v", sum, err)
	}
	if total, err := entity.Call[int](ctx, cl, "ledger", "shop", "Record", 0); err != nil || total != 3 {
		t.Fatalf("ledger total %d, %v; want 3", total, err)
	}

	// A crash of the new owner: its shards move once its lease expires, and
	// the state written before stays.
	owner = c.Owner("cart", "alice")
	killed := time.Now()
	c.Kill(owner)
	t.Logf("Kill returned in %s", time.Since(killed).Round(time.Millisecond))
	tenuretest.WaitFor(t, "a call to cart/alice after its owner was killed", 15*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		items, err = entity.Call[[]Item](cctx, cl, "cart", "alice", "List", nil)
		return err == nil
	})
	t.Logf("answered again %s after the kill", time.Since(killed).Round(time.Millisecond))
	var ae *entity.AppError
	if _, err := addOp.Call(ctx, cl, "alice", Item{SKU: "b", Price: 1}); !errors.As(err, &ae) || ae.Code != entity.CodeConflict {
		t.Fatalf("Add to a checked-out cart after the kill: %v, want the conflict AppError", err)
	}
	if len(items) != 1 {
		t.Fatalf("items after the kill: %+v", items)
	}
	c.Restart(owner)
	tenuretest.WaitFor(t, "the restarted runner to own shards", 10*time.Second, func() bool { return c.Runner(owner).Status().Owned > 0 })
	c.AwaitOwned(10 * time.Second)

	// A partition of the owner from etcd: it detaches, the others take its
	// shards; healed, it attaches again.
	owner = c.Owner("cart", "alice")
	cut := time.Now()
	c.Partition(owner)
	tenuretest.WaitFor(t, "cart/alice owned by another runner", 15*time.Second, func() bool {
		now := c.Owner("cart", "alice")
		return now >= 0 && now != owner
	})
	if _, err := entity.Call[[]Item](ctx, cl, "cart", "alice", "List", nil); err != nil {
		t.Fatalf("List after the partition: %v", err)
	}
	t.Logf("moved away from the partitioned runner in %s", time.Since(cut).Round(time.Millisecond))
	c.Heal(owner)
	tenuretest.WaitFor(t, "the healed runner attached", 15*time.Second, func() bool { return c.Runner(owner).Status().Attached })
}
