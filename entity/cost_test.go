package entity

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"

	"github.com/tenurehq/tenure/internal/testenv"
)

// completed sums the completed-task counter over the env's runners.
func (e *env) completed() float64 {
	sum := 0.0
	for _, n := range e.members() {
		sum += counterValue(e.t, n, "tenure_tasks_total")
	}
	return sum
}

// TestHappyPathS3Cost: a task submitted, claimed, run and completed costs at
// most 4 PUT-class requests, 1 GET and 1 DELETE, and no LIST.
func TestHappyPathS3Cost(t *testing.T) {
	e := newEnv(t, 2)
	e.start("solo", e.standard)
	e.waitOwned(10 * time.Second)
	// Let the initial listings (one per acquired shard) finish.
	testenv.WaitFor(t, "initial reconciliation", 10*time.Second, func() bool { return e.ops.snapshot()["list"] >= 2 })
	before := e.ops.snapshot()
	const n = 40
	for i := 0; i < n; i++ {
		req := task.SubmitRequest{Type: "job"}
		if i%2 == 1 {
			req = task.SubmitRequest{Type: "counter", Entity: fmt.Sprintf("c%d", i%5)}
		}
		e.submit(req)
	}
	testenv.WaitFor(t, "completions", 30*time.Second, func() bool { return e.completed() >= n })
	// Pointer deletes follow the commit: give them a moment to be counted.
	testenv.WaitFor(t, "pointer deletes", 5*time.Second, func() bool { return e.ops.snapshot()["delete"]-before["delete"] >= n })
	after := e.ops.snapshot()
	per := map[string]float64{}
	for op, c := range after {
		per[op] = float64(c-before[op]) / n
	}
	puts := per["create"] + per["replace"] + per["put"]
	t.Logf("S3 requests per task: %.2f PUT-class (create %.2f, replace %.2f, put %.2f), %.2f GET, %.2f DELETE, %.2f LIST, %.2f HEAD",
		puts, per["create"], per["replace"], per["put"], per["get"], per["delete"], per["list"], per["head"])
	if puts > 4 || per["get"] > 1 || per["delete"] > 1 || per["list"] > 0 {
		t.Fatalf("per task: %.2f PUT, %.2f GET, %.2f DELETE, %.2f LIST; want ≤ 4, 1, 1, 0", puts, per["get"], per["delete"], per["list"])
	}
}

// BenchmarkSubmitToStart measures the time from Submit to the handler's
// start with wake-ups on loopback, one task at a time; it reports p50 and
// p99.
func BenchmarkSubmitToStart(b *testing.B) {
	e := newEnv(b, 4)
	started := make(chan time.Time, 1)
	e.start("solo", func(n *node, h *Host) {
		if err := h.RegisterFunc("ping", func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
			started <- time.Now()
			return nil, nil
		}); err != nil {
			b.Fatal(err)
		}
	})
	e.waitOwned(10 * time.Second)
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		e.submit(task.SubmitRequest{Type: "ping"})
		select {
		case at := <-started:
			lat = append(lat, at.Sub(t0))
		case <-time.After(10 * time.Second):
			b.Fatal("task did not start")
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkThroughput measures no-op tasks per second with 1 and 3 runners:
// each iteration submits a batch from 16 goroutines and waits for it.
func BenchmarkThroughput(b *testing.B) {
	for _, runners := range []int{1, 3} {
		b.Run(fmt.Sprintf("runners=%d", runners), func(b *testing.B) {
			e := newEnv(b, 16)
			var done sync.WaitGroup
			for i := 0; i < runners; i++ {
				e.start(fmt.Sprintf("t%d", i), func(n *node, h *Host) {
					if err := h.RegisterFunc("noop", func(context.Context, *task.Task) (json.RawMessage, error) {
						done.Done()
						return nil, nil
					}); err != nil {
						b.Fatal(err)
					}
				})
			}
			e.waitOwned(15 * time.Second)
			const batch = 200
			total := 0
			var elapsed time.Duration
			for b.Loop() {
				done.Add(batch)
				t0 := time.Now()
				var wg sync.WaitGroup
				for g := 0; g < 16; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := g; i < batch; i += 16 {
							if _, _, err := e.client.Submit(context.Background(), task.SubmitRequest{Type: "noop"}); err != nil {
								b.Error(err)
								done.Done()
							}
						}
					}()
				}
				wg.Wait()
				done.Wait()
				elapsed += time.Since(t0)
				total += batch
			}
			b.ReportMetric(float64(total)/elapsed.Seconds(), "tasks/s")
		})
	}
}

// BenchmarkIdleRequests counts the S3 requests an idle three-runner cluster
// makes in 60 seconds (reconciliation listings and clock refreshes).
func BenchmarkIdleRequests(b *testing.B) {
	for b.Loop() {
		e := newEnv(b, 16)
		for i := 0; i < 3; i++ {
			e.start(fmt.Sprintf("idle%d", i), e.standard)
		}
		e.waitOwned(15 * time.Second)
		time.Sleep(3 * time.Second) // settle: initial listings (measurement window, not sync)
		before := e.ops.snapshot()
		time.Sleep(60 * time.Second) // the measurement window itself
		after := e.ops.snapshot()
		var ops []string
		total := 0
		for op, c := range after {
			if d := c - before[op]; d > 0 {
				ops = append(ops, fmt.Sprintf("%s=%d", op, d))
				total += d
			}
		}
		sort.Strings(ops)
		b.ReportMetric(float64(total), "requests/60s")
		b.Logf("idle 3-runner cluster, 16 shards, 60s: %v", ops)
	}
}
