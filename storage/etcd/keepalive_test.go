package etcd_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// keepAliveStreams is how many keep-alive streams etcd saw opened, and
// keep-alives it received on them, since before.
func keepAliveStreams(t *testing.T, before testenv.EtcdCalls) (opened, requests float64) {
	t.Helper()
	ka := testenv.EtcdCallsNow(t).Since(before)["LeaseKeepAlive"]
	return ka.Started, ka.Requests()
}

// TestKeepAliveStreamReusedUntilItFails: a session's keep-alives share one
// stream while it answers (counted at etcd: one stream opened for them
// all); a keep-alive that gets no answer in time ends the stream — a late
// answer on it must not be read as the next keep-alive's — and the next
// keep-alive, on a fresh stream, gets its own answer.
func TestKeepAliveStreamReusedUntilItFails(t *testing.T) {
	testenv.CheckLeaks(t)
	srv := testenv.SharedEtcd(t)
	u, err := url.Parse(srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewProxy(t, u.Host)
	s, err := etcd.New(testenv.ClientAt(t, "http://"+p.Addr()), etcd.WithPrefix(testenv.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ss, err := s.Register(ctx, storage.RunnerInfo{ID: "steady", Weight: 1}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close(ctx)
	keepAlive := func(timeout time.Duration) (storage.KeepAliveResult, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return ss.KeepAlive(cctx)
	}

	before := testenv.EtcdCallsNow(t)
	const n = 5
	for i := range n {
		res, err := keepAlive(2 * time.Second)
		if err != nil {
			t.Fatalf("keep-alive %d: %v", i, err)
		}
		if res.TTL != 10*time.Second || res.AnsweredAt.Before(res.SentAt) {
			t.Fatalf("keep-alive %d: %+v", i, res)
		}
	}
	if opened, reqs := keepAliveStreams(t, before); opened != 1 || reqs < n-1 {
		t.Fatalf("%d keep-alives: etcd saw %g streams opened and %g keep-alives, want 1 stream for them all", n, opened, reqs)
	}

	// Held back, the keep-alive gets no answer in time; released, its
	// request (and its answer) go through late.
	p.SetMode(testenv.Blackhole)
	if _, err := keepAlive(300 * time.Millisecond); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("keep-alive through a partition: %v, want ErrUnavailable", err)
	}
	p.SetMode(testenv.Pass)
	before = testenv.EtcdCallsNow(t)
	res, err := keepAlive(2 * time.Second)
	if err != nil {
		t.Fatalf("keep-alive after the partition healed: %v", err)
	}
	if res.TTL != 10*time.Second {
		t.Fatalf("keep-alive after the partition: %+v", res)
	}
	if opened, _ := keepAliveStreams(t, before); opened != 1 {
		t.Fatalf("after a keep-alive without an answer, etcd saw %g keep-alive streams opened, want a fresh one", opened)
	}
}
