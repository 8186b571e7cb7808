package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

// S3 cost scenario settings.
const (
	costRunners = 3
	costShards  = 16
	// settleWithin bounds the wait for the start-up listings to end.
	settleWithin = 30 * time.Second
	// typeCost is the task type of the happy path: it returns its input.
	typeCost = "bench-echo"
)

// Published S3 Standard request prices (us-east-1), USD per 1,000
// requests.
const (
	PricePutClass = 0.005  // PUT, COPY, POST, LIST
	PriceGetClass = 0.0004 // GET and all other requests (HEAD among them)
	PriceDelete   = 0.0    // DELETE is free
)

// The monthly cost estimate's workload.
const (
	EstimateTasksPerDay = 100_000
	EstimateRunners     = 50
	EstimateDays        = 30
)

// opClass maps a storage/s3 operation to its price class.
func opClass(op string) string {
	switch op {
	case "create", "replace", "put", "list", "check":
		return "put_class" // PutObject and ListObjectsV2
	case "delete":
		return "delete"
	}
	return "get_class" // get, head, servertime (HeadBucket)
}

// Classes are request counts by price class.
type Classes struct {
	PutClass float64 `json:"put_class"` // PUT, COPY, POST, LIST
	GetClass float64 `json:"get_class"` // GET, HEAD and others
	Delete   float64 `json:"delete"`
}

func classesOf(byOp map[string]float64) Classes {
	var c Classes
	for op, n := range byOp {
		switch opClass(op) {
		case "put_class":
			c.PutClass += n
		case "delete":
			c.Delete += n
		default:
			c.GetClass += n
		}
	}
	return Classes{PutClass: round(c.PutClass, 3), GetClass: round(c.GetClass, 3), Delete: round(c.Delete, 3)}
}

// usdPer1000 prices the counts at the published S3 prices.
func (c Classes) usdPer1000() float64 {
	return c.PutClass*PricePutClass + c.GetClass*PriceGetClass + c.Delete*PriceDelete
}

// S3CostResult holds the figures of s3cost.
type S3CostResult struct {
	Runners int `json:"runners"`
	Shards  int `json:"shards"`
	// PerTask is the S3 requests per completed task by storage/s3
	// operation (create, replace and put are PutObject; list and check
	// ListObjectsV2; servertime HeadBucket), submitter and runners
	// together, over every trial.
	PerTask        map[string]float64 `json:"per_task"`
	PerTaskClient  map[string]float64 `json:"per_task_client"`
	PerTaskRunners map[string]float64 `json:"per_task_runners"`
	PerTaskClasses Classes            `json:"per_task_by_class"`
	Idle           IdleFigures        `json:"idle"`
	Cost           CostEstimate       `json:"monthly_cost"`
	Trials         []S3CostTrial      `json:"trials"`
}

// S3CostTrial is one batch of happy-path tasks.
type S3CostTrial struct {
	Tasks   int                `json:"tasks"`
	PerTask map[string]float64 `json:"per_task"`
}

// IdleFigures are the requests of the idle cluster, runners only.
type IdleFigures struct {
	WindowS float64 `json:"window_s"`
	// Scaled: the window is shorter than a minute and the per-minute
	// figures are scaled up from it (rough: reconciliation is per shard
	// every reconcile interval, so a short window may catch more or fewer
	// listings than its share).
	Scaled             bool           `json:"scaled"`
	ReconcileIntervalS float64        `json:"reconcile_interval_s"`
	Requests           map[string]int `json:"requests"` // in the window, by operation
	PerMinute          float64        `json:"per_minute"`
	PerMinutePerRunner float64        `json:"per_minute_per_runner"`
	// PerMinutePerRunnerClasses are PerMinutePerRunner by price class.
	PerMinutePerRunnerClasses Classes `json:"per_minute_per_runner_by_class"`
}

// CostEstimate is a monthly S3 request-cost estimate.
type CostEstimate struct {
	PricesUSDPer1000 map[string]float64 `json:"prices_usd_per_1000"`
	TasksPerDay      int                `json:"tasks_per_day"`
	Runners          int                `json:"runners"`
	Days             int                `json:"days"`
	TaskRequestsUSD  float64            `json:"task_requests_usd"`
	IdleRequestsUSD  float64            `json:"idle_requests_usd"`
	TotalUSD         float64            `json:"total_usd"`
	Formula          string             `json:"formula"`
}

// estimate computes the monthly cost of perTask requests per task and
// idle requests per minute per runner.
func estimate(perTask, idlePerMinPerRunner Classes) CostEstimate {
	tasks := float64(EstimateTasksPerDay * EstimateDays)
	minutes := float64(EstimateRunners * 60 * 24 * EstimateDays)
	taskUSD := tasks * perTask.usdPer1000() / 1000
	idleUSD := minutes * idlePerMinPerRunner.usdPer1000() / 1000
	return CostEstimate{
		PricesUSDPer1000: map[string]float64{"put_copy_post_list": PricePutClass, "get_and_other": PriceGetClass, "delete": PriceDelete},
		TasksPerDay:      EstimateTasksPerDay,
		Runners:          EstimateRunners,
		Days:             EstimateDays,
		TaskRequestsUSD:  round(taskUSD, 2),
		IdleRequestsUSD:  round(idleUSD, 2),
		TotalUSD:         round(taskUSD+idleUSD, 2),
		Formula: fmt.Sprintf("tasks/day × days × (PUT-class/task × $%g + GET-class/task × $%g)/1000 "+
			"+ runners × 1440 min × days × (idle PUT-class/min/runner × $%g + idle GET-class/min/runner × $%g)/1000 "+
			"= %d × %d × (%.3g × %g + %.3g × %g)/1000 + %d × 1440 × %d × (%.3g × %g + %.3g × %g)/1000",
			PricePutClass, PriceGetClass, PricePutClass, PriceGetClass,
			EstimateTasksPerDay, EstimateDays, perTask.PutClass, PricePutClass, perTask.GetClass, PriceGetClass,
			EstimateRunners, EstimateDays, idlePerMinPerRunner.PutClass, PricePutClass, idlePerMinPerRunner.GetClass, PriceGetClass),
	}
}

// opCounter counts a store's requests by operation (an s3 Observer).
type opCounter struct {
	mu sync.Mutex
	n  map[string]float64
}

func (o *opCounter) observe(op string, _ error, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[op]++
}

func (o *opCounter) snapshot() map[string]float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.n)
}

// runnerOps sums the runners' S3 requests by operation, every outcome.
func runnerOps(rs []*inproc) (map[string]float64, error) {
	return counters(registries(rs), "tenure_s3_requests_total", "op", nil)
}

// perTask returns (after − before) / tasks by operation, leaving out zeros.
func perTask(before, after map[string]float64, tasks int) map[string]float64 {
	out := map[string]float64{}
	for op, n := range after {
		if d := n - before[op]; d > 0 {
			out[op] = round(d/float64(tasks), 3)
		}
	}
	return out
}

func addOps(dst, src map[string]float64) {
	for op, n := range src {
		dst[op] += n
	}
}

func runS3Cost(ctx context.Context, e *env) (Result, error) {
	c, err := e.newCluster(ctx, ScenarioS3Cost, costShards)
	if err != nil {
		return nil, err
	}
	echo := func(h *entity.Host) error {
		return h.RegisterFunc(typeCost, func(_ context.Context, t *task.Task) (json.RawMessage, error) { return t.Input, nil })
	}
	rs, _, err := c.startRunners(ctx, costRunners, echo)
	if err != nil {
		return nil, err
	}
	defer stopRunners(rs)
	cfg, err := c.config("bench-client")
	if err != nil {
		return nil, err
	}
	if err := settleListings(ctx, rs, costShards); err != nil {
		return nil, err
	}
	client := &opCounter{n: map[string]float64{}}
	tc, err := c.client(ctx, client.observe)
	if err != nil {
		return nil, err
	}
	res := &S3CostResult{Runners: costRunners, Shards: costShards}
	n := pick(e.o, 50, 10)
	totalClient, totalRunners := map[string]float64{}, map[string]float64{}
	tasks := 0
	for i := range e.trials {
		cBefore := client.snapshot()
		rBefore, err := runnerOps(rs)
		if err != nil {
			return nil, err
		}
		done, err := completed(registries(rs), typeCost)
		if err != nil {
			return nil, err
		}
		for j := range n {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, _, err := tc.Submit(sctx, task.SubmitRequest{Type: typeCost, Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, j))})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("bench: s3cost: submit: %w", err)
			}
		}
		if err := waitCompleted(ctx, rs, typeCost, done+float64(n), batchWithin); err != nil {
			return nil, err
		}
		// The ready pointer is deleted after the completing commit.
		if err := waitOps(ctx, rs, "delete", rBefore["delete"]+float64(n), 10*time.Second); err != nil {
			return nil, err
		}
		rAfter, err := runnerOps(rs)
		if err != nil {
			return nil, err
		}
		cAfter := client.snapshot()
		all := perTask(cBefore, cAfter, n)
		addOps(all, perTask(rBefore, rAfter, n))
		res.Trials = append(res.Trials, S3CostTrial{Tasks: n, PerTask: all})
		for op, v := range cAfter {
			totalClient[op] += v - cBefore[op]
		}
		for op, v := range rAfter {
			totalRunners[op] += v - rBefore[op]
		}
		tasks += n
		e.logf("s3cost: trial %d/%d: %d tasks: per task %s", i+1, e.trials, n, describeOps(all))
	}
	res.PerTaskClient = perTask(nil, totalClient, tasks)
	res.PerTaskRunners = perTask(nil, totalRunners, tasks)
	both := maps.Clone(totalClient)
	addOps(both, totalRunners)
	res.PerTask = perTask(nil, both, tasks)
	res.PerTaskClasses = classesOf(res.PerTask)

	window := pick(e.o, time.Minute, 5*time.Second)
	e.logf("s3cost: measuring the idle cluster's requests for %s", window)
	idle, err := idleRequests(ctx, rs, window)
	if err != nil {
		return nil, err
	}
	res.Idle = IdleFigures{WindowS: window.Seconds(), Scaled: window < time.Minute, ReconcileIntervalS: cfg.Entity.ReconcileInterval.Std().Seconds(), Requests: map[string]int{}}
	perMin := map[string]float64{}
	total := 0.0
	for op, v := range idle {
		res.Idle.Requests[op] = int(v)
		perMin[op] = v * time.Minute.Seconds() / window.Seconds() / costRunners
		total += v
	}
	res.Idle.PerMinute = round(total*time.Minute.Seconds()/window.Seconds(), 2)
	res.Idle.PerMinutePerRunner = round(res.Idle.PerMinute/costRunners, 3)
	res.Idle.PerMinutePerRunnerClasses = classesOf(perMin)
	res.Cost = estimate(res.PerTaskClasses, res.Idle.PerMinutePerRunnerClasses)
	return res, nil
}

// settleListings waits for the listing each runner makes of each shard it
// acquires: at least one per shard, then none for a second.
func settleListings(ctx context.Context, rs []*inproc, shards int) error {
	deadline := time.Now().Add(settleWithin)
	last, since := -1.0, time.Now()
	for {
		ops, err := runnerOps(rs)
		if err != nil {
			return err
		}
		if n := ops["list"]; n != last {
			last, since = n, time.Now()
		}
		if last >= float64(shards) && time.Since(since) >= time.Second {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the runners' start-up listings did not settle within %s (%.0f listings)", settleWithin, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitOps waits until the runners have made want requests of op.
func waitOps(ctx context.Context, rs []*inproc, op string, want float64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ops, err := runnerOps(rs)
		if err != nil {
			return err
		}
		if ops[op] >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %.0f of %.0f %s requests after %s", ops[op], want, op, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// idleRequests counts the runners' requests over window.
func idleRequests(ctx context.Context, rs []*inproc, window time.Duration) (map[string]float64, error) {
	before, err := runnerOps(rs)
	if err != nil {
		return nil, err
	}
	select {
	case <-time.After(window): // the measurement window itself
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for _, x := range rs {
		if err := x.failed(); err != nil {
			return nil, err
		}
	}
	after, err := runnerOps(rs)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for op, n := range after {
		if d := n - before[op]; d > 0 {
			out[op] = d
		}
	}
	return out, nil
}

// describeOps renders per-operation figures, sorted.
func describeOps(m map[string]float64) string {
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%g", op, m[op]))
	}
	return strings.Join(parts, " ")
}
