package entity

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
)

// echo answers a call with its body.
type echo struct{}

func (echo) Handle(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil }
func (echo) Receive(_ context.Context, m *Message) ([]byte, error)       { return m.Body, nil }

// BenchmarkDeliver: local calls from 64 goroutines over 1,000 entities of
// owned shards, round robin, through Host.Deliver (gate, turn, handler,
// metrics).
func BenchmarkDeliver(b *testing.B) {
	e := newEnv(b, 16)
	h := e.bareHost(func(h *Host) {
		if err := h.Register("echo", func(string) (Entity, error) { return echo{}, nil }); err != nil {
			b.Fatal(err)
		}
	})
	h.ownAll()
	const entities = 1000
	ds := make([]Delivery, entities)
	for i := range ds {
		ds[i] = h.delivery("echo", fmt.Sprintf("e%d", i), `{"x":1}`)
	}
	ctx := context.Background()
	for _, d := range ds { // make every instance resident
		if _, err := h.Deliver(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(97))
		for pb.Next() {
			i++
			if _, err := h.Deliver(ctx, ds[i%entities]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

// hot is a defined type whose Get is read-only and Touch, which changes
// nothing, is not: the cost of sharing a turn against taking it alone.
type hot struct {
	N int `json:"n"`
}

func (h *hot) Get(_ Context) (int, error)   { return h.N, nil }
func (h *hot) Touch(_ Context) (int, error) { return h.N, nil }

// BenchmarkDeliverOneEntity: local calls from 64 goroutines to one entity
// of a defined type: a read-only operation (readers share the turn) and
// a writing one that saves nothing (one at a time).
func BenchmarkDeliverOneEntity(b *testing.B) {
	for _, op := range []string{"Get", "Touch"} {
		b.Run(op, func(b *testing.B) {
			e := newEnv(b, 1)
			h := e.bareHost(func(h *Host) {
				if err := h.Define(Define[hot]("hot", nil, ReadOnly("Get"), Volatile())); err != nil {
					b.Fatal(err)
				}
			})
			h.ownAll()
			d := h.delivery("hot", "h1", ``)
			d.Op = op
			ctx := context.Background()
			if _, err := h.Deliver(ctx, d); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := h.Deliver(ctx, d); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
		})
	}
}
