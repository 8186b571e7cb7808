package etcd_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// TestKeepAliveFailsFastWithoutLeader: when the member a runner talks to
// loses its leader, keep-alives fail at once with "no leader"
// (WithRequireLeader) instead of hanging until their timeout.
func TestKeepAliveFailsFastWithoutLeader(t *testing.T) {
	members := testenv.NewEtcdCluster(t, 3)
	const callTimeout = 4 * time.Second
	s, err := etcd.New(members[0].Client(t), etcd.WithPrefix(testenv.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ss, err := s.Register(ctx, storage.RunnerInfo{ID: "lonely", Weight: 1}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res storage.KeepAliveResult
		err error
	}
	results := make(chan result, 64)
	go storage.KeepAliveLoop(ctx, ss, storage.KeepAliveCadence{Interval: 300 * time.Millisecond, Timeout: callTimeout},
		func(res storage.KeepAliveResult, err error) {
			select {
			case results <- result{res, err}:
			case <-ctx.Done():
			}
		})
	// Quorum lost: member 0 keeps running but has no leader.
	members[1].Close()
	members[2].Close()
	for {
		select {
		case r := <-results:
			if r.err == nil {
				continue // a keep-alive that got through before the leader went
			}
			took := time.Since(r.res.SentAt)
			if !strings.Contains(r.err.Error(), "no leader") {
				t.Fatalf("keep-alive failed with %v, want a no-leader error", r.err)
			}
			if took >= callTimeout {
				t.Fatalf("the no-leader failure took %s, not faster than the %s call timeout", took, callTimeout)
			}
			t.Logf("keep-alive failed %s after sending: %v", took, r.err)
			return
		case <-ctx.Done():
			t.Fatal("no keep-alive failure while the member has no leader")
		}
	}
}

// TestWakeWatchEndsCleanlyWithoutLeader: a wake watch broken by a lost
// leader keeps trying to re-open; cancelling it then ends it cleanly.
func TestWakeWatchEndsCleanlyWithoutLeader(t *testing.T) {
	members := testenv.NewEtcdCluster(t, 3)
	var logs syncBuffer
	s, err := etcd.New(members[0].Client(t), etcd.WithPrefix(testenv.Prefix(t)), etcd.WithRequestTimeout(300*time.Millisecond),
		etcd.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.WatchWakes(ctx, storage.ShardID{Group: "default", Index: 1})
	if err != nil {
		t.Fatal(err)
	}
	members[1].Close()
	members[2].Close()
	// The watch breaks (no leader) and its re-opening fails for a while:
	// cancel it then.
	testenv.WaitFor(t, "the watch to break", 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "wake watch broken")
	})
	cancel()
	testenv.WaitFor(t, "the wake channel to close", 10*time.Second, func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	})
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
