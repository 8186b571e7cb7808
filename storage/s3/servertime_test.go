package s3

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

func TestServerTimeRequestsOnlyWhenMissingOrStale(t *testing.T) {
	rec := &recorder{}
	s := openStore(t, WithObserver(rec.observe))
	ctx := testCtx(t)
	if _, err := s.ServerTime(ctx); err != nil {
		t.Fatalf("ServerTime: %v", err)
	}
	if n := rec.count(opServerTime); n != 1 {
		t.Fatalf("first ServerTime made %d requests, want 1 (no sample yet)", n)
	}
	for i := 0; i < 5; i++ {
		if _, err := s.ServerTime(ctx); err != nil {
			t.Fatalf("ServerTime: %v", err)
		}
	}
	if n := rec.count(opServerTime); n != 1 {
		t.Fatalf("ServerTime with a fresh estimate made requests: %d in all, want 1", n)
	}

	always := openStore(t, WithObserver(rec.observe), WithTimeMaxAge(0))
	for i := 0; i < 3; i++ {
		if _, err := always.ServerTime(ctx); err != nil {
			t.Fatalf("ServerTime: %v", err)
		}
	}
	if n := rec.count(opServerTime); n != 1+3 {
		t.Fatalf("ServerTime with max age 0 made %d requests in 3 calls, want 3", n-1)
	}
}

func TestServerTimeLearnsFromErrorResponses(t *testing.T) {
	// A 412 is as good a clock sample as a 200: a store whose only request
	// lost a conditional write needs no request of its own for the time.
	gw := testenv.SharedS3(t)
	bucket := gw.Bucket(t)
	ctx := testCtx(t)
	cli := newClient(t, clientConfig(t))
	first, err := New(cli, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Create(ctx, "k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	s, err := New(cli, bucket, WithObserver(rec.observe))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "k", []byte("y")); err == nil {
		t.Fatal("second Create won")
	}
	if got := s.ClockStats().Samples; got != 1 {
		t.Fatalf("clock samples after one 412 = %d, want 1", got)
	}
	if _, err := s.ServerTime(ctx); err != nil {
		t.Fatalf("ServerTime: %v", err)
	}
	if n := rec.count(opServerTime); n != 0 {
		t.Fatalf("ServerTime made %d requests after a 412 carried the Date", n)
	}
}

func TestServerTimeOnCallerClient(t *testing.T) {
	// The middleware is installed per call, so a client the caller built
	// (here testenv's) feeds the clock too.
	gw := testenv.SharedS3(t)
	s, err := New(gw.Client(), gw.Bucket(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(testCtx(t), "k", nil); err != nil {
		t.Fatal(err)
	}
	if got := s.ClockStats().Samples; got != 1 {
		t.Fatalf("clock samples after one Put on a caller's client = %d, want 1", got)
	}
}

func TestServerTimeConcurrentRefreshIsOneRequest(t *testing.T) {
	rec := &recorder{}
	s := openStore(t, WithObserver(rec.observe))
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.ServerTime(ctx)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("ServerTime: %v", err)
		}
	}
	if n := rec.count(opServerTime); n != 1 {
		t.Fatalf("20 concurrent ServerTime calls on a fresh store made %d requests, want 1", n)
	}
}

func TestServerTimeTracksTheGatewayClock(t *testing.T) {
	// The embedded gateway runs in this process, so its clock is ours: the
	// estimate's interval must hold time.Now, within the slack for a Date
	// header refreshed late on a loaded machine.
	const slack = 250 * time.Millisecond
	s := openStore(t)
	ctx := testCtx(t)
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		if _, err := s.Head(ctx, "k"); err == nil {
			t.Fatal("Head of a missing key succeeded")
		}
		before := time.Now()
		st, err := s.ServerTime(ctx)
		after := time.Now()
		if err != nil {
			t.Fatalf("ServerTime: %v", err)
		}
		if after.Before(st.Earliest().Add(-slack)) || before.After(st.Latest().Add(slack)) {
			t.Fatalf("sample %d: local clock [%s, %s] outside the estimate [%s, %s]",
				i, before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano),
				st.Earliest().Format(time.RFC3339Nano), st.Latest().Format(time.RFC3339Nano))
		}
		if st.Uncertainty > DefaultDateResolution {
			t.Fatalf("uncertainty %s exceeds one sample's", st.Uncertainty)
		}
		// Spread samples over the gateway's second; a timer, not
		// synchronisation.
		wait, cancel := context.WithTimeout(ctx, 37*time.Millisecond)
		<-wait.Done()
		cancel()
	}
	st, _ := s.ServerTime(ctx)
	t.Logf("clock stats %+v, uncertainty %s", s.ClockStats(), st.Uncertainty)
}
