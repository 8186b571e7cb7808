package s3

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/s3count"
	"github.com/tenurehq/tenure/internal/testenv"
)

// TestClientKeepsConnectionsForItsConcurrency: a client from NewClient
// keeps as many idle connections as it has requests in flight (up to
// MaxIdleConns), so that waves of concurrent requests reuse them instead
// of opening a connection per request — counted at the server's side of
// the wire. With the SDK's own default (10 idle per host) the same waves
// open a connection for most requests.
func TestClientKeepsConnectionsForItsConcurrency(t *testing.T) {
	const inFlight = 40
	for _, tc := range []struct {
		name      string
		idle      int
		maxOpened int // in the later waves
		minOpened int
	}{
		{"default", 0, 2, 0},
		{"sdk-default", 10, 2 * inFlight, inFlight / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := testenv.SharedS3(t)
			// A round trip long enough that every request of a wave is in
			// flight at once however busy the machine: a wave needs
			// inFlight connections.
			p, err := s3count.New(gw.Endpoint(), s3count.WithLatency(200*time.Millisecond, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			c := clientConfig(t)
			c.Endpoint, c.MaxIdleConns = p.URL(), tc.idle
			cli, err := NewClient(testCtx(t), c)
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(cli, gw.Bucket(t), WithPrefix("conns/"))
			if err != nil {
				t.Fatal(err)
			}
			wave := func(n int) {
				var wg sync.WaitGroup
				for i := range inFlight {
					wg.Go(func() {
						if _, err := s.Put(testCtx(t), fmt.Sprintf("k-%d-%d", n, i), []byte("x")); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
			}
			wave(0)
			before := p.Counts()
			wave(1)
			wave(2)
			got := p.Counts().Sub(before)
			if got.Total() != 2*inFlight {
				t.Fatalf("%d requests on the wire, want %d", got.Total(), 2*inFlight)
			}
			if got.Connections > tc.maxOpened || got.Connections < tc.minOpened {
				t.Fatalf("%d connections opened for %d requests in waves of %d, want %d to %d", got.Connections, got.Total(), inFlight, tc.minOpened, tc.maxOpened)
			}
			t.Logf("%d connections opened for %d requests in waves of %d", got.Connections, got.Total(), inFlight)
		})
	}
}
