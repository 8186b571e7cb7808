package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/storage"
)

// How the process tests time the moves of shards: with the bounds of
// package harness (harness.WatchBound, harness.RevokeBound), by an
// outside observer, the test's own watch of the shard locks
// (harness.LockTimeline), never the runners' word.

// watchOnlyRunner sets the runners' timers that can take a shard without
// a watch event (the rebalance loop's safety pass, the acquire retries)
// harness.TimersAway, past the end of the tests that use it: a shard then
// moves on an etcd watch event or not in time.
var watchOnlyRunner = []string{"--set", "sharding.rebalance_interval=" + harness.TimersAway.String(),
	"--set", "sharding.acquire_retry_interval=" + harness.TimersAway.String()}

// lockWatch starts the observer's watch of the shard locks, ended at the
// test's cleanup.
func lockWatch(t *testing.T, c *cluster) *harness.LockTimeline {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return watchLocks(ctx, c)
}

// releasedLive checks that each of runner's locks of shards deleted since
// from was deleted while runner's registration (on the same lease) still
// existed, read from etcd at the revision of the deletion: a release, not
// the end of its lease. It returns how many it checked.
func releasedLive(t *testing.T, c *cluster, locks *harness.LockTimeline, runner string, shards []storage.ShardID, from time.Time) int {
	t.Helper()
	n := 0
	for _, ch := range locks.Since(from) {
		if ch.Prev != runner || ch.Holder != "" || !slices.Contains(shards, ch.Shard) {
			continue
		}
		if ch.Resync {
			t.Errorf("the delete of %s's lock of %s was learnt by a listing (rev %d): when it happened is unknown", runner, ch.Shard, ch.Rev)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.store.Client().Get(ctx, c.Prefix+"runners/"+runner, clientv3.WithRev(ch.Rev), clientv3.WithCountOnly())
		cancel()
		switch {
		case err != nil:
			t.Fatalf("reading %s's registration at rev %d: %v", runner, ch.Rev, err)
		case resp.Count == 0:
			t.Errorf("%s's lock of %s went at rev %d with its registration: its lease ended, it did not release it", runner, ch.Shard, ch.Rev)
		}
		n++
	}
	return n
}
