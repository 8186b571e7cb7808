package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestFollowLeaseFindsExpiry: a lease granted and never kept alive expires
// TTL after etcd received the grant; followLease's expiry lies between
// the grant's send time + TTL − (a poll interval and a round trip) and
// its answer's time + TTL, and the lease is gone after it.
func TestFollowLeaseFindsExpiry(t *testing.T) {
	testenv.CheckLeaks(t)
	cli := testenv.SharedEtcd(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = 2 * time.Second
	sent := time.Now()
	grant, err := cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	var wg sync.WaitGroup
	expiry := followLease(ctx, cli, grant.ID, &wg)
	testenv.WaitFor(t, "the lease to expire", 10*time.Second, func() bool {
		r, err := cli.TimeToLive(ctx, grant.ID)
		return err == nil && r.TTL == -1
	})
	gone := time.Now()
	at, err := expiry()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := sent.Add(ttl-50*time.Millisecond), answered.Add(ttl)
	t.Logf("expiry %s after the grant was sent (bounds %s … %s); seen gone %s after it", at.Sub(sent), lo.Sub(sent), hi.Sub(sent), gone.Sub(sent))
	if at.Before(lo) || at.After(hi) || at.After(gone) {
		t.Fatalf("expiry %s after the grant, want within [%s, %s] and before the lease was seen gone (%s)", at.Sub(sent), lo.Sub(sent), hi.Sub(sent), gone.Sub(sent))
	}
}

// TestFollowLeaseWithoutAnswer: a lease etcd never reports a remaining
// time for (it does not exist) gives an error, not a zero expiry.
func TestFollowLeaseWithoutAnswer(t *testing.T) {
	cli := testenv.SharedEtcd(t).Client(t)
	var wg sync.WaitGroup
	expiry := followLease(context.Background(), cli, 0x7e57, &wg)
	_, err := expiry()
	wg.Wait()
	if err == nil {
		t.Fatal("expiry of a lease that does not exist: no error")
	}
}
