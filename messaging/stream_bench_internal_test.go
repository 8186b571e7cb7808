package messaging

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/tenurehq/tenure/routing"
	"google.golang.org/grpc"
)

// TENURE_TEST_STREAMS_PER_CONN sets streamsPerConn in this package's
// tests and benchmarks, to measure how many streams a connection needs at
// a core count (go test -bench CallRemote -cpu 16).
func init() {
	if n, err := strconv.Atoi(os.Getenv("TENURE_TEST_STREAMS_PER_CONN")); err == nil && n > 0 {
		streamsPerConn = n
	}
}

// BenchmarkStreamBatching makes remote attempts from 32 callers per core
// and reports how many requests a frame carried on average: the batching
// that the writers' yield before each frame buys.
func BenchmarkStreamBatching(b *testing.B) {
	counter := newMethodCounter()
	srv, err := NewServer(deliverFunc(echoDeliverer), streamTestConfig())
	if err != nil {
		b.Fatal(err)
	}
	addr := serveGRPCB(b, srv, grpc.StatsHandler(counter))
	c, err := NewClient(routing.New(nil), streamTestConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	owner := routing.Owner{RunnerID: "b", Addr: addr, Epoch: 5}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, _, err := c.attemptRemote(ctx, &call{kind: kindCall, typ: "echo", id: "e1", body: []byte("hello")}, owner); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if _, frames := counter.counts("Stream"); frames > 0 {
		b.ReportMetric(float64(b.N)/float64(frames), "calls/frame")
	}
}
