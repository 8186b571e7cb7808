package messaging_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/messaging"
)

// echo answers with the request: the transport's cost alone.
func echo(_ context.Context, d entity.Delivery) ([]byte, error) { return d.Body, nil }

var benchBody = []byte(`{"op":"get","key":"k-0123456789","n":1}`)

// benchCalls runs b.N calls through c with callers concurrent callers and
// reports calls/s.
func benchCalls(b *testing.B, c *messaging.Client, callers int) {
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	if callers == 1 {
		for b.Loop() {
			if _, err := c.Call(ctx, "echo", "e1", benchBody); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Call(ctx, "echo", "e1", benchBody); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

func BenchmarkCallRemote(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			v := newView()
			v.runner("b", serve(b, &fake{fn: echo}), "echo") // runners list their types
			v.lock("b", 5)
			c, _ := v.client(b)
			benchCalls(b, c, callers)
		})
	}
}

func BenchmarkCallLocal(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			v := newView()
			v.runner("self", deadAddr(b), "echo")
			v.lock("self", 5)
			c, _ := v.client(b, messaging.WithLocal("self", &fake{fn: echo}))
			benchCalls(b, c, callers)
		})
	}
}
