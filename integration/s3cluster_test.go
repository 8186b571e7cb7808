package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
	s3store "github.com/tenurehq/tenure/storage/s3"
	"github.com/tenurehq/tenure/storage/s3coord"
)

// Clusters that coordinate on S3 (coordination: s3): no etcd at all; the
// runners register, hold their shard locks and read the dynamic config
// through conditional writes in the cluster's bucket, each through an S3
// fault proxy of its own.

// The test's own view of the coordination objects polls the gateway
// directly (no proxy) at one fixed interval, the backend's shortest.
const (
	s3LockPoll    = s3coord.DefaultMinPollInterval
	s3LockTimeout = time.Second // bounds each of the observer's requests
)

// s3LockLag is how far the observer's lock timeline may trail the truth:
// one poll. A lock written just after a poll listed shards/ is seen by the
// next poll, which begins s3LockPoll after that one ends: the observation
// arrives at most the rest of the poll under way, the interval, and the
// next poll after the write. A poll is a handful of requests (the server
// time, a LIST and changed GETs of runners/, then of shards/), each
// bounded by s3LockTimeout; on the idle gateway the test reaches directly
// a whole poll takes a few tens of milliseconds, so s3LockTimeout stands
// for each of the two polls. A poll that fails makes the next one a
// re-listing (Resync), whose arrival the timeline does not judge. The
// timeline gives this lag at the acquisition edge only (an execution must
// begin no earlier than s3LockLag before its tenure was first seen); the
// release edge and the overlap checks get none.
const s3LockLag = s3LockTimeout + s3LockPoll + s3LockTimeout

// newS3Cluster runs a cluster coordinating on S3: the shared VersityGW in
// the test process and a bucket of its own; runners reach S3 through
// per-runner fault proxies. The helpers (owners, task clients' wakes) use
// a coordination store of the test's own on the gateway directly.
func newS3Cluster(t testing.TB, shards int) *cluster {
	t.Helper()
	s3 := testenv.SharedS3(t)
	bucket := s3.Bucket(t)
	ak, sk := s3.Credentials()
	dir := t.TempDir()
	cfg := map[string]any{
		"cluster":      "dev",
		"shards":       shards,
		"coordination": "s3",
		"s3": map[string]any{"endpoint": s3.Endpoint(), "region": s3.Region(), "bucket": bucket, "path_style": true,
			"access_key": ak, "secret_key": sk},
	}
	b, _ := yaml.Marshal(cfg)
	cfgPath := filepath.Join(dir, "tenure.yaml")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir, cfgPath: cfgPath, s3EP: s3.Endpoint(),
		Cluster: harness.New(t, harness.Spec{Name: "dev", Meta: storage.ClusterMeta{Shards: shards},
			S3: harness.S3{Endpoint: s3.Endpoint(), Region: s3.Region(), AccessKey: ak, SecretKey: sk, Bucket: bucket}})}
	c.coord = c.s3Coord(s3coord.WithRequestTimeout(5 * time.Second))
	return c
}

// s3Coord opens a coordination store of the cluster's on the gateway
// directly, closed at cleanup.
func (c *cluster) s3Coord(opts ...s3coord.Option) *s3coord.Store {
	c.t.Helper()
	cfg, err := runner.Load(c.cfgPath, nil, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	obj, err := runner.NewObjectStore(context.Background(), cfg, s3store.WithPrefix(runner.CoordPrefix(cfg)))
	if err != nil {
		c.t.Fatal(err)
	}
	st, err := s3coord.New(obj, append([]s3coord.Option{s3coord.WithEndpoint(c.s3EP + "/" + cfg.S3.Bucket)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { st.Close() })
	return st
}

// watchS3Locks follows the shard locks of a cluster on S3 with a store of
// its own polling the gateway directly every s3LockPoll; its timeline
// judges the acquisition edge with s3LockLag (harness.NewPolledLockTimeline).
func watchS3Locks(ctx context.Context, c *cluster) *harness.LockTimeline {
	st := c.s3Coord(s3coord.WithPollInterval(s3LockPoll, s3LockPoll), s3coord.WithRequestTimeout(s3LockTimeout))
	return harness.WatchPolledLocks(ctx, st, s3LockLag)
}
