package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/s3count"
	"github.com/tenurehq/tenure/runner"
)

// Task scenario settings.
const (
	taskShards = 16
	// submitters is the number of goroutines submitting a throughput batch.
	submitters = 16
	// batchWithin bounds the completion of one throughput batch.
	batchWithin = 2 * time.Minute
	// startWithin bounds the wait for one latency task to start.
	startWithin = 10 * time.Second
	// latencyWarmup tasks run before the measured ones (connections, first
	// entity activations).
	latencyWarmup = 5
	// typeNoop is the no-op task type of throughput.
	typeNoop = "bench-noop"
	// typePing is the task type of latency; its handler reports its start.
	typePing = "bench-ping"
)

// ThroughputResult holds the figures of throughput: completed no-op tasks
// per second (first submit to last completion) with one and three
// in-process runners, submitted from several goroutines, and the same
// S3 server's own rate for the request mix of those tasks (Ceiling): the
// ratio is Tenure's share of what the server could do. Runners and
// submitters reach S3 through one counting proxy, which counts the mix
// on the wire; the ceiling goes through the same kind of proxy, so the
// proxy's cost is on both sides of the ratio.
type ThroughputResult struct {
	Shards        int               `json:"shards"`
	Submitters    int               `json:"submitters"`
	TasksPerTrial int               `json:"tasks_per_trial"`
	OneRunner     float64           `json:"tasks_per_s_1_runner"`  // median over trials
	ThreeRunners  float64           `json:"tasks_per_s_3_runners"` // median over trials
	Trials        []ThroughputTrial `json:"trials"`
	// PerTask is the requests per task on the wire over every trial, by
	// operation (runners and submitters together).
	PerTask map[string]float64 `json:"per_task"`
	// CeilingTasksPerS is Ceiling.TasksPerS; Ratio is OneRunner over it,
	// Ratio3 ThreeRunners over Ceiling3's.
	CeilingTasksPerS float64 `json:"ceiling_tasks_per_s"`
	Ratio            float64 `json:"ratio"`
	Ratio3           float64 `json:"ratio_3_runners"`
	// Ceiling is measured interleaved with the one-runner trials (a
	// ceiling trial right after each runner trial, through the same
	// proxy, the runners idle), Ceiling3 with the three-runner ones: the
	// machine's drift over a run (seen to move either side's rate by a
	// quarter between its first and last trial) then moves both sides of
	// each ratio alike, where a ceiling measured after every runner trial
	// got all of it.
	Ceiling  *Ceiling `json:"ceiling"`
	Ceiling3 *Ceiling `json:"ceiling_3_runners"`
}

// ThroughputTrial is one batch.
type ThroughputTrial struct {
	Runners   int     `json:"runners"`
	Tasks     int     `json:"tasks"`
	ElapsedMS float64 `json:"elapsed_ms"`
	TasksPerS float64 `json:"tasks_per_s"`
	// PeakInFlight is the largest number of S3 requests in flight at once
	// during the batch, on the wire.
	PeakInFlight int `json:"peak_in_flight"`
	// Connections is the S3 connections opened during the batch, runners
	// and submitter together, on the wire (a client that keeps enough
	// connections alive opens a few, once).
	Connections int `json:"s3_connections"`
}

// throughputCounts are the wire counts of the trials so far: the
// requests per task reported (PerTask).
type throughputCounts struct {
	counts s3count.Counts
	tasks  int
}

func runThroughput(ctx context.Context, e *env) (Result, error) {
	res := &ThroughputResult{Shards: taskShards, Submitters: submitters, TasksPerTrial: pick(e.o, 500, 100)}
	seen := &throughputCounts{counts: s3count.Counts{}}
	for _, n := range []int{1, 3} {
		rates, ceiling, err := throughputWith(ctx, e, n, res, seen)
		if err != nil {
			return nil, err
		}
		if n == 1 {
			res.OneRunner, res.Ceiling = round(median(rates), 1), ceiling
		} else {
			res.ThreeRunners, res.Ceiling3 = round(median(rates), 1), ceiling
		}
	}
	res.PerTask = mixOf(seen.counts, seen.tasks)
	res.CeilingTasksPerS = res.Ceiling.TasksPerS
	if c := res.CeilingTasksPerS; c > 0 {
		res.Ratio = round(res.OneRunner/c, 3)
	}
	if c := res.Ceiling3.TasksPerS; c > 0 {
		res.Ratio3 = round(res.ThreeRunners/c, 3)
	}
	e.logf("throughput: 1 runner %.0f tasks/s = %.2f of the S3 ceiling (%.0f task-equivalents/s); 3 runners %.0f = %.2f of theirs (%.0f)",
		res.OneRunner, res.Ratio, res.CeilingTasksPerS, res.ThreeRunners, res.Ratio3, res.Ceiling3.TasksPerS)
	return res, nil
}

// throughputWith runs the trials of n runners, adding their wire counts
// to seen, each followed by a trial of the S3 ceiling through the same
// proxy while the runners idle: the ceiling of the first trial's mix and
// peak of requests in flight, measured interleaved (see
// ThroughputResult.Ceiling).
func throughputWith(ctx context.Context, e *env, n int, res *ThroughputResult, seen *throughputCounts) ([]float64, *Ceiling, error) {
	c, err := e.newCluster(ctx, fmt.Sprintf("%s%d", ScenarioThroughput, n), taskShards)
	if err != nil {
		return nil, nil, err
	}
	wire, err := c.countingProxy()
	if err != nil {
		return nil, nil, err
	}
	c.overrides = append(c.overrides, "s3.endpoint="+wire.URL())
	noop := func(h *entity.Host) error {
		return h.RegisterFunc(typeNoop, func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
	}
	rs, tc, err := c.runnersAndClient(ctx, n, noop)
	if err != nil {
		return nil, nil, err
	}
	defer stopRunners(rs)
	regs := registries(rs)
	var (
		rates []float64
		ceil  *Ceiling
	)
	for i := range e.trials {
		base, err := completed(regs, typeNoop)
		if err != nil {
			return nil, nil, err
		}
		before := wire.Counts()
		wire.TakePeakInFlight()
		start := time.Now()
		refs, err := submitBatch(ctx, tc, typeNoop, res.TasksPerTrial, submitters)
		if err != nil {
			return nil, nil, err
		}
		if err := waitCompleted(ctx, rs, tc, refs, typeNoop, base+float64(res.TasksPerTrial), batchWithin); err != nil {
			return nil, nil, err
		}
		d := time.Since(start)
		peak := wire.TakePeakInFlight()
		// The ready pointers are deleted after the completing commits:
		// count the batch's requests once they are all on the wire.
		if err := waitOps(ctx, wire, before, s3count.OpDelete, res.TasksPerTrial, 10*time.Second); err != nil {
			return nil, nil, err
		}
		batch := wire.Counts().Sub(before)
		seen.counts = seen.counts.Add(batch)
		seen.tasks += res.TasksPerTrial
		rate := float64(res.TasksPerTrial) / d.Seconds()
		res.Trials = append(res.Trials, ThroughputTrial{Runners: n, Tasks: res.TasksPerTrial, ElapsedMS: ms(d), TasksPerS: round(rate, 1), PeakInFlight: peak,
			Connections: batch.Connections})
		rates = append(rates, rate)
		e.logf("throughput: %d runner(s), trial %d/%d: %d tasks in %s: %.0f tasks/s (%d S3 requests in flight at most, %d connections opened)",
			n, i+1, e.trials, res.TasksPerTrial, d.Round(time.Millisecond), rate, peak, batch.Connections)
		if ceil == nil {
			// The ceiling replays the first trial's mix with as many
			// workers as it had requests in flight at its peak, through
			// a counting proxy of its own: the idle runners' few
			// requests are not counted as its.
			cwire, err := c.countingProxy()
			if err != nil {
				return nil, nil, err
			}
			cfg, err := c.config("bench-ceiling", "s3.endpoint="+cwire.URL())
			if err != nil {
				return nil, nil, err
			}
			ceil = newCeiling(batch, res.TasksPerTrial, peak)
			ceil.wire, ceil.keyPrefix = cwire, fmt.Sprintf("ceiling%d/", n)
			if ceil.store, err = runner.NewObjectStore(ctx, cfg); err != nil {
				return nil, nil, fmt.Errorf("bench: S3 ceiling: %w", err)
			}
			e.logf("throughput: S3 ceiling of one task's requests %v from %d workers, a trial after each of %d runner(s)' trials", ceil.Sequence, ceil.Workers, n)
		}
		if err := ceil.trial(ctx, e, i, res.TasksPerTrial); err != nil {
			return nil, nil, err
		}
	}
	ceil.finish()
	return rates, ceil, nil
}

// mixOf is counts per task, by operation, rounded to 3 decimals.
func mixOf(counts s3count.Counts, tasks int) map[string]float64 {
	mix := map[string]float64{}
	for op, n := range counts.Requests {
		mix[string(op)] = round(float64(n)/float64(tasks), 3)
	}
	return mix
}

// startRunners starts n in-process runners b1…bn and waits for the
// cluster to converge.
func (c *cluster) startRunners(ctx context.Context, n int, register func(*entity.Host) error) ([]*inproc, []string, error) {
	var rs []*inproc
	var ids []string
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("b%d", i)
		x, err := c.startRunner(id, register)
		if err != nil {
			stopRunners(rs)
			return nil, nil, err
		}
		rs, ids = append(rs, x), append(ids, id)
	}
	alive := func() error {
		for _, x := range rs {
			if err := x.failed(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := c.convergedAlive(ctx, ids, alive); err != nil {
		stopRunners(rs)
		return nil, nil, err
	}
	return rs, ids, nil
}

// runnersAndClient starts n in-process runners (see startRunners) and a
// task client of the cluster; the caller stops the runners.
func (c *cluster) runnersAndClient(ctx context.Context, n int, register func(*entity.Host) error) ([]*inproc, *task.Client, error) {
	rs, _, err := c.startRunners(ctx, n, register)
	if err != nil {
		return nil, nil, err
	}
	tc, err := c.client(ctx)
	if err != nil {
		stopRunners(rs)
		return nil, nil, err
	}
	return rs, tc, nil
}

// stopRunners stops runners at once and waits for them.
func stopRunners(rs []*inproc) {
	var wg sync.WaitGroup
	for _, x := range rs {
		wg.Add(1)
		go func() { defer wg.Done(); x.stop() }()
	}
	wg.Wait()
}

// submitBatch submits n tasks of typ from g goroutines and returns their
// refs.
func submitBatch(ctx context.Context, tc *task.Client, typ string, n, goroutines int) ([]string, error) {
	errs := make(chan error, goroutines)
	refs := make([]string, n)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += goroutines {
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				tk, _, err := tc.Submit(sctx, task.SubmitRequest{Type: typ})
				cancel()
				if err != nil {
					errs <- fmt.Errorf("bench: submit: %w", err)
					return
				}
				refs[i] = tk.Ref()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return refs, <-errs
}

// completed returns the number of tasks of typ completed by the runners
// of regs.
func completed(regs []*prometheus.Registry, typ string) (float64, error) {
	m, err := counters(regs, "tenure_tasks_attempts_total", "", map[string]string{"type": typ, "outcome": "completed"})
	return m[""], err
}

// stallCheck is how long the runners' completion counters may stand
// still before waitCompleted asks the task store.
const stallCheck = 2 * time.Second

// waitCompleted waits until the runners have completed want tasks of typ,
// as their attempt counters say, or, when refs are given and the counters
// have stood still for stallCheck, until the task store says that every
// one of refs is completed. The counters are the fast signal (no request
// per poll), but they are the runners' own: an attempt whose completing
// write landed while a detachment cut off its answer counts as
// abandoned, and its task, completed in S3, is not counted again. The
// store, read from outside, has the last word.
func waitCompleted(ctx context.Context, rs []*inproc, tc *task.Client, refs []string, typ string, want float64, within time.Duration) error {
	regs := registries(rs)
	deadline := time.Now().Add(within)
	last, moved := -1.0, time.Now()
	done := map[string]bool{}
	for {
		n, err := completed(regs, typ)
		if err != nil {
			return err
		}
		if n >= want {
			return nil
		}
		if n != last {
			last, moved = n, time.Now()
		}
		for _, x := range rs {
			if err := x.failed(); err != nil {
				return err
			}
		}
		if len(refs) > 0 && time.Since(moved) >= stallCheck {
			left, err := notCompleted(ctx, tc, refs, done)
			if err != nil {
				return err
			}
			if left == 0 {
				return nil
			}
			moved = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %.0f of %.0f %s tasks completed after %s", n, want, typ, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// notCompleted reads the tasks of refs not yet in done from the store,
// adds the completed ones to done, and returns how many are left.
func notCompleted(ctx context.Context, tc *task.Client, refs []string, done map[string]bool) (int, error) {
	left := 0
	for _, ref := range refs {
		if done[ref] {
			continue
		}
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		tk, err := tc.Get(gctx, ref)
		cancel()
		switch {
		case err != nil:
			return 0, fmt.Errorf("bench: reading task %s: %w", ref, err)
		case tk.Status == task.Completed:
			done[ref] = true
		default:
			left++
		}
	}
	return left, nil
}

// LatencyResult holds the figures of latency: submit → handler start, one
// task at a time, with wake-ups through the coordination store, on one
// in-process runner.
type LatencyResult struct {
	Shards int     `json:"shards"`
	Tasks  int     `json:"tasks"`
	Warmup int     `json:"warmup_tasks"` // run first, not counted
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	MaxMS  float64 `json:"max_ms"`
	MeanMS float64 `json:"mean_ms"`
	// Trials are the tasks' latencies in submission order, in ms.
	Trials []float64 `json:"trials"`
}

func runLatency(ctx context.Context, e *env) (Result, error) {
	c, err := e.newCluster(ctx, ScenarioLatency, taskShards)
	if err != nil {
		return nil, err
	}
	started := make(chan time.Time)
	ping := pingType(typePing, started)
	rs, tc, err := c.runnersAndClient(ctx, 1, ping)
	if err != nil {
		return nil, err
	}
	defer stopRunners(rs)
	n := pick(e.o, 200, 20)
	res := &LatencyResult{Shards: taskShards, Tasks: n, Warmup: latencyWarmup}
	if res.Trials, err = submitToStart(ctx, tc, typePing, started, latencyWarmup, n, startWithin, rs[0].logPath); err != nil {
		return nil, fmt.Errorf("bench: latency: %w", err)
	}
	// Let the last outcome commit before the runner stops.
	if err := waitCompleted(ctx, rs, tc, nil, typePing, float64(latencyWarmup+n), startWithin); err != nil {
		return nil, err
	}
	res.P50MS, res.P99MS = quantile(res.Trials, 0.5), quantile(res.Trials, 0.99)
	res.MaxMS, res.MeanMS = maxOf(res.Trials), round(mean(res.Trials), 3)
	e.logf("latency: %d tasks: p50 %.2fms p99 %.2fms", n, res.P50MS, res.P99MS)
	return res, nil
}

// pingType registers typ, whose handler sends its start time on started.
func pingType(typ string, started chan<- time.Time) func(*entity.Host) error {
	return func(h *entity.Host) error {
		return h.RegisterFunc(typ, func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			at := time.Now()
			select {
			case started <- at:
			case <-ctx.Done():
			}
			return nil, nil
		})
	}
}

// submitToStart submits warmup + n tasks of typ one at a time, each after
// the previous one started (its handler sends its start on started), and
// returns the n measured latencies from the submit call to the handler's
// start, in ms.
func submitToStart(ctx context.Context, tc *task.Client, typ string, started <-chan time.Time, warmup, n int, within time.Duration, logPath string) ([]float64, error) {
	var out []float64
	for i := range warmup + n {
		t0 := time.Now()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, _, err := tc.Submit(sctx, task.SubmitRequest{Type: typ})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
		select {
		case at := <-started:
			if i >= warmup {
				out = append(out, ms(at.Sub(t0)))
			}
		case <-time.After(within):
			return nil, fmt.Errorf("task %d did not start within %s (log %s)", i+1, within, logPath)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}
