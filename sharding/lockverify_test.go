package sharding

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// cutStream wraps a runner store (through faultyStore, which logs the lock
// calls) so that a test can break its membership stream for good: once cut
// it announces the break, as the store does, and then delivers nothing, as
// a watch whose re-listing never gets through.
type cutStream struct {
	*faultyStore
	cut    chan struct{} // closed by the test to break the stream
	broken chan struct{} // closed once the break was announced
}

func (s *cutStream) WatchMembership(ctx context.Context) <-chan storage.MembershipBatch {
	in := s.faultyStore.WatchMembership(ctx)
	out := make(chan storage.MembershipBatch)
	go func() {
		defer close(out)
		var last int64
		for {
			var b storage.MembershipBatch
			select {
			case v, ok := <-in:
				if !ok {
					return
				}
				b, last = v, v.Revision
			case <-s.cut:
				b = storage.MembershipBatch{Revision: last, Interrupted: true}
			}
			select {
			case out <- b:
			case <-ctx.Done():
				return
			}
			if b.Interrupted {
				close(s.broken)
				for range in { // dropped: the stream stays broken until the store closes it
				}
				return
			}
		}
	}()
	return out
}

// TestLocksReadOnlyWhileStreamOutOfSync: while the membership stream is in
// sync the runner reads no lock to verify it (the stream reports every
// change); once the stream announces a break, the runner verifies its
// locks each refresh interval, and a lock deleted behind its back, which
// the broken stream no longer reports, is found lost by that read.
func TestLocksReadOnlyWhileStreamOutOfSync(t *testing.T) {
	testenv.CheckLeaks(t)
	cfg := testConfig()
	cfg.RebalanceInterval = time.Minute // no safety pass: only the refresh may read the locks
	c := newCluster(t, 4, cfg)
	var cs *cutStream
	r := c.startWith("solo", 1, func(s storage.RunnerStore) storage.RunnerStore {
		cs = &cutStream{faultyStore: &faultyStore{RunnerStore: s}, cut: make(chan struct{}), broken: make(chan struct{})}
		return cs
	})
	c.waitConverged(c.members(), 10*time.Second)

	from := time.Now()
	observe := time.NewTimer(4 * cfg.LockRefreshInterval)
	<-observe.C // an observation period, not a synchronisation
	for _, op := range cs.opsSince(from) {
		if op.op == "verify" {
			t.Fatalf("lock verification read at %v while the stream was in sync", op.at.Sub(from))
		}
	}

	close(cs.cut)
	<-cs.broken
	cutAt := time.Now()
	o := r.mgr.Owned()[0]
	if _, err := c.srv.Client(t).Delete(context.Background(), c.Prefix+"shards/"+o.Shard.Group+"/"+strconv.Itoa(o.Shard.Index)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-o.Ctx.Done():
	case <-time.After(10 * cfg.LockRefreshInterval):
		t.Fatal("a lock deleted while the stream was broken was not found lost")
	}
	var lost *LostError
	if !errors.As(context.Cause(o.Ctx), &lost) || lost.Reason != LossLockLost || !strings.Contains(lost.Error(), "lock verification") {
		t.Fatalf("cause %v, want LossLockLost found by lock verification", context.Cause(o.Ctx))
	}
	verifies := 0
	for _, op := range cs.opsSince(cutAt) {
		if op.op == "verify" {
			verifies++
		}
	}
	t.Logf("lost %s after the delete; %d verification reads since the break", time.Since(cutAt).Round(time.Millisecond), verifies)
}
