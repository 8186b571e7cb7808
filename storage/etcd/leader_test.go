package etcd_test

import (
	"context"
	"strings"
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
	s, err := etcd.New(members[0].Client(t), etcd.WithPrefix(testenv.Prefix(t)),
		etcd.WithKeepAliveInterval(300*time.Millisecond), etcd.WithKeepAliveTimeout(callTimeout))
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
	health := ss.Health(ctx)
	<-health // the registration's observation
	// Quorum lost: member 0 keeps running but has no leader.
	members[1].Close()
	members[2].Close()
	for {
		select {
		case h := <-health:
			if h.OK {
				continue // a keep-alive that got through before the leader went
			}
			took := time.Since(h.SentAt)
			if !strings.Contains(h.Err.Error(), "no leader") {
				t.Fatalf("keep-alive failed with %v, want a no-leader error", h.Err)
			}
			if took >= callTimeout {
				t.Fatalf("the no-leader failure took %s, not faster than the %s call timeout", took, callTimeout)
			}
			t.Logf("keep-alive failed %s after sending: %v", took, h.Err)
			return
		case <-ctx.Done():
			t.Fatal("no keep-alive failure while the member has no leader")
		}
	}
}
