package harness

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/netproxy"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// TestProxiedStoreCanBeCut: a member's store reaches the cluster's keys
// through its own proxy, and a blackholed proxy cuts that member alone.
func TestProxiedStoreCanBeCut(t *testing.T) {
	c := New(t, Spec{Etcd: testenv.SharedEtcd(t).Endpoint(), Prefix: testenv.Prefix(t),
		Meta: storage.ClusterMeta{Shards: 4, Groups: []string{storage.DefaultGroup}, Hash: "test"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	direct, err := c.Store(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	member, p, err := c.ProxiedStore(ctx, etcd.WithRequestTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := member.EnsureMeta(ctx, c.Meta); err != nil {
		t.Fatal(err)
	}
	if got, err := direct.Meta(ctx); err != nil || got.Shards != 4 {
		t.Fatalf("meta written through the proxy, read directly: %+v %v", got, err)
	}
	p.SetMode(netproxy.Blackhole)
	if _, err := member.Meta(ctx); err == nil {
		t.Fatal("a blackholed member still reads etcd")
	}
	if _, err := direct.Meta(ctx); err != nil {
		t.Fatalf("the direct store is cut too: %v", err)
	}
	p.SetMode(netproxy.Pass)
}

// TestRunnerConfigNamesTheCluster: the runner config overrides carry the
// cluster's name, shards, etcd and bucket.
func TestRunnerConfigNamesTheCluster(t *testing.T) {
	c := New(t, Spec{Name: "c1", Meta: storage.ClusterMeta{Shards: 8},
		S3: S3{Endpoint: "http://s3", Region: "r", AccessKey: "ak", SecretKey: "sk", Bucket: "b"}})
	got := c.RunnerConfig("http://etcd")
	for _, kv := range []string{"cluster=c1", "shards=8", "etcd.endpoints=http://etcd", "s3.endpoint=http://s3",
		"s3.region=r", "s3.bucket=b", "s3.path_style=true", "s3.access_key=ak", "s3.secret_key=sk"} {
		if !slices.Contains(got, kv) {
			t.Errorf("RunnerConfig lacks %s: %v", kv, got)
		}
	}
}
