package s3count_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/s3count"
)

// TestLatencyPerRequest: a simulated round trip is paid once per request,
// however large the body: a 1 MiB PUT (dozens of TCP reads) through a
// 1 s round trip takes at least 1 s and far less than a delay per chunk
// would make it (≥ 16 chunks × half a round trip each way: 8 s).
//
// The upper bound, 4 round trips, lies between the two: it leaves the
// PUT's own work (a megabyte through a local proxy to the S3 server,
// milliseconds on a quiet machine) 3 s on a loaded one. The round trip is
// long for that slack, not for what it models.
func TestLatencyPerRequest(t *testing.T) {
	const rtt = time.Second
	st, p, _ := storeVia(t, s3count.WithLatency(rtt, 0))
	ctx := ctxFor(t)
	if _, err := st.Put(ctx, "warm", []byte("x")); err != nil { // opens the connection
		t.Fatal(err)
	}
	for _, size := range []int{1, 1 << 20} {
		body := bytes.Repeat([]byte("a"), size)
		t0 := time.Now()
		if _, err := st.Put(ctx, "big", body); err != nil {
			t.Fatal(err)
		}
		d := time.Since(t0)
		t.Logf("PUT of %d bytes through a %s round trip: %s", size, rtt, d)
		if d < rtt {
			t.Errorf("PUT of %d bytes took %s, less than the round trip %s", size, d, rtt)
		}
		if d > 4*rtt {
			t.Errorf("PUT of %d bytes took %s: more than 4 round trips, the delay multiplies", size, d)
		}
	}
	c := p.Counts()
	if c.BodyBytes[s3count.OpPut] != 1+1+1<<20 {
		t.Errorf("body bytes of the PUTs: %d, want %d", c.BodyBytes[s3count.OpPut], 2+1<<20)
	}
	if c.SentBytes[s3count.OpPut] <= c.BodyBytes[s3count.OpPut] || c.ReceivedBytes[s3count.OpPut] <= 0 {
		t.Errorf("sent %d, received %d bytes: want headers counted", c.SentBytes[s3count.OpPut], c.ReceivedBytes[s3count.OpPut])
	}
	d := c.Sub(c)
	if len(d.SentBytes) != 0 || len(d.BodyBytes) != 0 {
		t.Errorf("c − c = %+v, want no bytes", d)
	}
}

// TestLatencyCancelled: a client that gives up during the simulated
// latency gets its error at once, and the request is not forwarded.
func TestLatencyCancelled(t *testing.T) {
	st, p, _ := storeVia(t, s3count.WithLatency(time.Hour, 0))
	ctx, cancel := context.WithTimeout(ctxFor(t), 200*time.Millisecond)
	defer cancel()
	if _, err := st.Create(ctx, "never", []byte("x")); err == nil {
		t.Fatal("create through a one-hour round trip returned no error")
	}
	if n := p.Counts().Status[s3count.OpCreate][200]; n != 0 {
		t.Fatalf("%d creates answered 200, want none forwarded", n)
	}
}

// TestPeakInFlight: requests held by the server at once are the peak; the
// next period starts from those still in flight.
func TestPeakInFlight(t *testing.T) {
	const n = 4
	var arrived sync.WaitGroup
	arrived.Add(n)
	release := make(chan struct{})
	hook := func(r s3count.Request) s3count.Fault {
		if r.Op == s3count.OpGet {
			arrived.Done()
			<-release
		}
		return s3count.Forward
	}
	st, p, _ := storeVia(t, s3count.WithFaults(hook))
	ctx := ctxFor(t)
	if _, err := st.Put(ctx, "k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got := p.TakePeakInFlight(); got != 1 {
		t.Errorf("peak after one request at a time: %d, want 1", got)
	}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := st.Get(ctx, "k"); err != nil {
				t.Error(err)
			}
		}()
	}
	arrived.Wait()
	if got := p.TakePeakInFlight(); got != n {
		t.Errorf("peak with %d requests held: %d", n, got)
	}
	close(release)
	wg.Wait()
	if got := p.TakePeakInFlight(); got != n {
		t.Errorf("peak of the period that started with %d in flight: %d", n, got)
	}
	if got := p.TakePeakInFlight(); got != 0 {
		t.Errorf("peak of an idle period: %d, want 0", got)
	}
}
