package integration

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

// TestS3ProxyBlackholeHoldsUntilHealed: the S3 proxy's blackhole answers
// nothing, neither before the client gives up nor at the heal (which drops
// the connection), and passes requests again after it; the SlowDown mode
// answers 503 without forwarding.
func TestS3ProxyBlackholeHoldsUntilHealed(t *testing.T) {
	s3 := testenv.SharedS3(t)
	p := newS3Proxy(t, s3.Endpoint())
	// No connection reused: a GET whose reused connection drops would be
	// sent again by the transport on a new one.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		return client.Do(req)
	}

	p.set(s3Blackhole, 1)
	// A client that gives up gets no answer.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	resp, err := get(ctx)
	cancel()
	if err == nil {
		resp.Body.Close()
		t.Fatalf("blackholed request answered %s", resp.Status)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blackholed request: %v, want the client's own deadline", err)
	}
	// A request held at the heal ends without an answer.
	errc := make(chan error, 1)
	go func() {
		resp, err := get(context.Background())
		if err == nil {
			resp.Body.Close()
			err = errors.New("answered " + resp.Status)
		} else {
			err = nil
		}
		errc <- err
	}()
	testenv.WaitFor(t, "the second request to reach the blackhole", 10*time.Second, func() bool { return p.injected.Load() == 2 })
	select {
	case err := <-errc:
		t.Fatalf("blackholed request ended before the heal: %v", err)
	default:
	}
	p.set(s3Pass, 0)
	if err := <-errc; err != nil {
		t.Fatalf("request held at the heal: %v, want its connection dropped unanswered", err)
	}
	// Healed: requests are forwarded again (the gateway answers, whatever
	// it thinks of an unsigned request).
	resp, err = get(context.Background())
	if err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	resp.Body.Close()

	p.set(s3SlowDown, 1)
	resp, err = get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("SlowDown mode answered %s, want 503", resp.Status)
	}
}
