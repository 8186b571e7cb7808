package sharding

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// TestJoinsClusterOfEarlierProcedure: a runner of this version that joins a
// cluster created with placement.ProcedureV1 uses v1, so that it computes the owners
// the cluster's other runners compute, and leaves the meta as it was; a
// cluster whose meta names a procedure this version does not know is
// refused with an error naming it.
func TestJoinsClusterOfEarlierProcedure(t *testing.T) {
	testenv.CheckLeaks(t)
	c := newCluster(t, 16, testConfig())
	c.Meta.Hash = placement.ProcedureV1.Name() // created by an earlier version
	c.start("old", 1)
	c.waitConverged(c.members(), 15*time.Second)

	meta := c.Meta
	meta.Hash = placement.HashName // this version's own idea of a new cluster
	st := c.store()
	self := storage.RunnerInfo{ID: "new", Weight: 1, Groups: []string{storage.DefaultGroup}, Version: "test"}
	mgr, err := New(st, self, meta, c.cfg, WithHandler(c.ledger.handler("new")), WithLogger(testLogger(t, "new")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	old := c.members()[0]
	testenv.WaitFor(t, "the two runners to settle on v1's owners", 15*time.Second, func() bool {
		own := map[storage.ShardID]string{}
		for _, o := range old.mgr.Owned() {
			own[o.Shard] = "old"
		}
		for _, o := range mgr.Owned() {
			own[o.Shard] = "new"
		}
		cands := []placement.Candidate{{ID: "old", Weight: 1}, {ID: "new", Weight: 1}}
		return len(own) == 16 && maps.Equal(placement.Assignment(own), placement.ProcedureV1.Reassign(c.Meta.Groups, 16, cands, own))
	})
	if p := mgr.Procedure(); p != placement.ProcedureV1 {
		t.Fatalf("the new runner uses %s, want %s", p, placement.ProcedureV1)
	}
	stored, err := st.Meta(context.Background())
	if err != nil || stored.Hash != placement.ProcedureV1.Name() {
		t.Fatalf("stored meta %+v, %v: want it left at v1", stored, err)
	}
	c.ledger.checkNoOverlap(t)

	// A cluster made by a newer version.
	c2 := newCluster(t, 16, testConfig())
	st2 := c2.store()
	future := c2.Meta
	future.Hash = "xxhash64-rendezvous-sticky/v9"
	if _, err := st2.EnsureMeta(context.Background(), future); err != nil {
		t.Fatal(err)
	}
	mgr2, err := New(st2, self, c2.Meta, c2.cfg, WithLogger(testLogger(t, "new2")))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	err = mgr2.Run(rctx)
	if !errors.Is(err, placement.ErrUnknownProcedure) || !strings.Contains(err.Error(), "v9") {
		t.Fatalf("Run in a cluster of an unknown procedure: %v; want ErrUnknownProcedure naming it", err)
	}
}
