package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/s3count"
	"github.com/tenurehq/tenure/storage"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

// ceilingOrder is the order of one task-equivalent's requests: the ready
// pointer and the task object are written, read, replaced (claim and
// outcome), and the pointer deleted, as the task path does.
var ceilingOrder = []s3count.Op{s3count.OpPut, s3count.OpCreate, s3count.OpGet, s3count.OpHead,
	s3count.OpReplace, s3count.OpList, s3count.OpDelete}

// Ceiling is the S3 server's own rate for the request mix of one task,
// measured in the same run with no Tenure in between: the same requests
// (by operation, with the same body sizes, counted on the wire in the
// first throughput trial) from as many concurrent workers as that trial
// had requests in flight at its peak, through a counting proxy of the
// same kind (and simulated latency, if any), one ceiling trial right
// after each throughput trial (see ThroughputResult.Ceiling).
type Ceiling struct {
	// Mix is the first throughput trial's requests per task on the wire,
	// by operation, rounded to 3 decimals.
	Mix map[string]float64 `json:"mix_per_task"`
	// Sequence is one task-equivalent: Mix rounded to whole requests, in
	// the order they are sent. Skipped are the operations of Mix left out
	// (fewer than half a request per task, or none a store call makes).
	Sequence []string `json:"sequence"`
	Skipped  []string `json:"skipped,omitempty"`
	// BodyBytes is the body size of each PUT-like operation, the mean of
	// the first throughput trial's.
	BodyBytes map[string]int `json:"body_bytes"`
	Workers   int            `json:"workers"`
	// OpsPerS and TasksPerS are medians over trials: requests per second
	// and task-equivalents (sequences) per second.
	OpsPerS   float64        `json:"ops_per_s"`
	TasksPerS float64        `json:"task_equivalents_per_s"`
	Trials    []CeilingTrial `json:"trials"`
	wire      *s3count.Proxy // the counting proxy the trials go through
	store     *s3store.Store // the ceiling's own store, on wire
	bodies    map[s3count.Op][]byte
	seq       []s3count.Op
	keyPrefix string
}

// CeilingTrial is one batch of task-equivalents.
type CeilingTrial struct {
	Tasks     int     `json:"task_equivalents"`
	Requests  int     `json:"requests"` // counted on the wire
	ElapsedMS float64 `json:"elapsed_ms"`
	TasksPerS float64 `json:"task_equivalents_per_s"`
	OpsPerS   float64 `json:"ops_per_s"`
}

// newCeiling derives the sequence from the wire counts of the throughput
// trials (tasks tasks) and the number of workers from their peak.
func newCeiling(counts s3count.Counts, tasks, peak int) *Ceiling {
	c := &Ceiling{Mix: mixOf(counts, tasks), BodyBytes: map[string]int{}, Workers: max(peak, 1), bodies: map[s3count.Op][]byte{}}
	for op, n := range counts.Requests {
		if !slices.Contains(ceilingOrder, op) || float64(n)/float64(tasks) < 0.5 {
			c.Skipped = append(c.Skipped, string(op))
		}
	}
	slices.Sort(c.Skipped)
	for _, op := range ceilingOrder {
		n := counts.Requests[op]
		k := int(math.Round(float64(n) / float64(tasks)))
		for range k {
			c.seq = append(c.seq, op)
			c.Sequence = append(c.Sequence, string(op))
		}
		if k > 0 && counts.BodyBytes[op] > 0 {
			size := counts.BodyBytes[op] / n
			c.BodyBytes[string(op)] = size
			c.bodies[op] = fakeBody(size)
		}
	}
	return c
}

// fakeBody is a JSON body of size bytes (at least 2).
func fakeBody(size int) []byte {
	size = max(size, 2)
	b := make([]byte, size)
	b[0], b[size-1] = '"', '"'
	for i := 1; i < size-1; i++ {
		b[i] = 'x'
	}
	return b
}

// trial measures the i-th batch of tasks task-equivalents (of e.trials;
// finish takes the medians).
func (c *Ceiling) trial(ctx context.Context, e *env, i, tasks int) error {
	prefix := fmt.Sprintf("%s%d/", c.keyPrefix, i)
	if err := c.setup(ctx, prefix, tasks); err != nil {
		return err
	}
	before := c.wire.Counts()
	start := time.Now()
	if err := c.batch(ctx, prefix, tasks); err != nil {
		return err
	}
	d := time.Since(start)
	n := c.wire.Counts().Sub(before).Total()
	t := CeilingTrial{Tasks: tasks, Requests: n, ElapsedMS: ms(d), TasksPerS: round(float64(tasks)/d.Seconds(), 1),
		OpsPerS: round(float64(n)/d.Seconds(), 1)}
	c.Trials = append(c.Trials, t)
	e.logf("throughput: S3 ceiling, trial %d/%d: %d task-equivalents (%d requests) from %d workers in %s: %.0f/s (%.0f requests/s)",
		i+1, e.trials, tasks, n, c.Workers, d.Round(time.Millisecond), t.TasksPerS, t.OpsPerS)
	return nil
}

// finish sets the medians over the trials.
func (c *Ceiling) finish() {
	var ops, rates []float64
	for _, t := range c.Trials {
		ops, rates = append(ops, t.OpsPerS), append(rates, t.TasksPerS)
	}
	c.OpsPerS, c.TasksPerS = round(median(ops), 1), round(median(rates), 1)
}

// setup creates the task objects beforehand when the sequence reads or
// replaces them without creating them (a task path whose objects are
// written otherwise): the setup is not timed.
func (c *Ceiling) setup(ctx context.Context, prefix string, tasks int) error {
	if slices.Contains(c.seq, s3count.OpCreate) {
		return nil
	}
	if !slices.ContainsFunc(c.seq, func(op s3count.Op) bool {
		return op == s3count.OpGet || op == s3count.OpHead || op == s3count.OpReplace
	}) {
		return nil
	}
	return c.parallel(ctx, tasks, func(ctx context.Context, i int) error {
		_, err := c.store.Put(ctx, fmt.Sprintf("%st/%d", prefix, i), fakeBody(c.BodyBytes[string(s3count.OpReplace)]))
		return err
	})
}

// batch sends tasks sequences from c.Workers workers.
func (c *Ceiling) batch(ctx context.Context, prefix string, tasks int) error {
	return c.parallel(ctx, tasks, func(ctx context.Context, i int) error { return c.sequence(ctx, prefix, i) })
}

// parallel runs f for 0 ≤ i < n from c.Workers workers, stopping at the
// first error.
func (c *Ceiling) parallel(ctx context.Context, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c.Workers)
	for range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					errs <- fmt.Errorf("bench: S3 ceiling: %w", err)
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// sequence sends one task-equivalent's requests, one after the other, on
// its own task key and pointer key.
func (c *Ceiling) sequence(ctx context.Context, prefix string, i int) error {
	key, ptr := fmt.Sprintf("%st/%d", prefix, i), fmt.Sprintf("%sp/%d", prefix, i)
	etag := ""
	deleted := 0
	for _, op := range c.seq {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var err error
		switch op {
		case s3count.OpPut:
			_, err = c.store.Put(rctx, ptr, c.bodies[op])
		case s3count.OpCreate:
			etag, err = c.store.Create(rctx, key, c.bodies[op])
		case s3count.OpGet:
			var obj storage.Object
			obj, err = c.store.Get(rctx, key)
			etag = obj.ETag
		case s3count.OpHead:
			var info storage.ObjectInfo
			info, err = c.store.Head(rctx, key)
			etag = info.ETag
		case s3count.OpReplace:
			if etag == "" { // nothing read or created it before: a HEAD for its ETag (counted on the wire)
				var info storage.ObjectInfo
				if info, err = c.store.Head(rctx, key); err == nil {
					etag = info.ETag
				}
			}
			if err == nil {
				etag, err = c.store.Replace(rctx, key, c.bodies[op], etag)
			}
		case s3count.OpList:
			_, err = c.store.List(rctx, ptr, storage.ListOptions{Limit: 100})
		case s3count.OpDelete:
			target := ptr
			if deleted > 0 || !slices.Contains(c.seq, s3count.OpPut) {
				target = key
			}
			deleted++
			err = c.store.Delete(rctx, target)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	return nil
}
