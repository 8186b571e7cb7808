package runnermetrics

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/runner"
)

// wait bounds each wait of Gather: the runner's start, and its stop.
const wait = 30 * time.Second

// Gather runs a runner on the shared etcd and S3 servers until its own
// series (tenure_runner_*, registered once it runs) are exported, stops it,
// and returns the families its registry gathered then, each with whether
// it is a histogram (whose series carry _bucket, _sum and _count).
func Gather(t testing.TB) map[string]bool {
	t.Helper()
	etcdSrv, s3Srv := testenv.SharedEtcd(t), testenv.SharedS3(t)
	ak, sk := s3Srv.Credentials()
	cfg, err := runner.Load(os.DevNull, nil, []string{
		"cluster=" + testenv.Name(t, 40), "runner_id=metrics", "shards=2", "admin_addr=",
		"etcd.endpoints=" + etcdSrv.Endpoint(),
		"s3.endpoint=" + s3Srv.Endpoint(), "s3.region=" + s3Srv.Region(), "s3.bucket=" + s3Srv.Bucket(t), "s3.path_style=true",
		"s3.access_key=" + ak, "s3.secret_key=" + sk, "log.level=error", "drain_timeout=5s",
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := runner.New(cfg, runner.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if done == nil {
			return // Run has returned already
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("runner: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("runner did not stop within %s", wait)
		}
	}()
	names := map[string]bool{}
	deadline := time.Now().Add(wait)
	for {
		if _, ok := names["tenure_runner_info"]; ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner exported no tenure_runner_info within %s (got %d families)", wait, len(names))
		}
		select {
		case err := <-done:
			done = nil
			t.Fatalf("runner stopped: %v", err)
		case <-time.After(20 * time.Millisecond): // poll interval of the registry
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			names[mf.GetName()] = mf.GetType().String() == "HISTOGRAM"
		}
	}
	return names
}
