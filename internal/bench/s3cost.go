package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/etcdcalls"
	"github.com/tenurehq/tenure/internal/s3count"
	"github.com/tenurehq/tenure/runner"
)

// S3 cost scenario settings.
const (
	costRunners = 3
	// costShards is the shard count of the idle cluster priced in
	// IdleClusterCost.
	costShards = 64
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

// Classes are request counts by price class.
type Classes struct {
	PutClass float64 `json:"put_class"` // PUT, COPY, POST, LIST
	GetClass float64 `json:"get_class"` // GET, HEAD and others
	Delete   float64 `json:"delete"`
}

// classesOf sums requests by S3 operation (s3count.Op names) into price
// classes.
func classesOf(byOp map[string]float64) Classes {
	var c Classes
	for op, n := range byOp {
		switch s3count.Op(op).Class() {
		case s3count.ClassPut:
			c.PutClass += n
		case s3count.ClassDelete:
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
	// PerTask is the S3 requests per completed task as counted on the
	// wire by a counting proxy (internal/s3count), by operation (create,
	// replace and put are PutObject; list ListObjectsV2; head_bucket
	// HeadBucket), submitter and runners together, over every trial; SDK
	// retries count.
	PerTask        map[string]float64 `json:"per_task"`
	PerTaskClient  map[string]float64 `json:"per_task_client"`
	PerTaskRunners map[string]float64 `json:"per_task_runners"`
	PerTaskClasses Classes            `json:"per_task_by_class"`
	// UnderLoad is the runners' S3 request rate while the trials' tasks
	// ran.
	UnderLoad LoadFigures  `json:"under_load"`
	Idle      IdleFigures  `json:"idle"`
	Cost      CostEstimate `json:"monthly_cost"`
	// IdleCluster is the monthly request cost of the measured cluster
	// (Runners runners, Shards shards) left idle.
	IdleCluster IdleClusterCost `json:"idle_cluster_monthly_cost"`
	Trials      []S3CostTrial   `json:"trials"`
}

// S3CostTrial is one batch of happy-path tasks.
type S3CostTrial struct {
	Tasks   int                `json:"tasks"`
	PerTask map[string]float64 `json:"per_task"`
	// Retries and Failed are the batch's requests the SDK marked as
	// retries and those answered with a 5xx or not at all, on the wire.
	Retries int `json:"retries"`
	Failed  int `json:"failed"`
	// Non2xx counts the answers other than 2xx by "operation status", e.g.
	// "put 409": VersityGW's POSIX backend answers a pointer PUT racing
	// with the removal of an emptied directory with 409, and the store
	// sends it again (real S3 has no directories).
	Non2xx map[string]int `json:"non_2xx,omitempty"`
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
	// Etcd is the idle runners' etcd requests over the same window; nil
	// when the runners coordinate on S3 (their coordination requests are
	// then among Requests).
	Etcd *IdleEtcd `json:"etcd,omitempty"`
	// Model is the steady state of an idle cluster by the runners'
	// configuration: the window above follows the trials' activity, so
	// its shards list every reconcile interval, before backing off.
	Model IdleModel `json:"model"`
}

// LoadFigures are the runners' S3 requests while tasks run: over the
// trials' batches together, from the first submit of each to its last
// completion (and its ready pointers' deletion), the submitter's requests
// left out.
type LoadFigures struct {
	WindowS   float64        `json:"window_s"`
	Tasks     int            `json:"tasks"`
	TasksPerS float64        `json:"tasks_per_s"`
	Requests  map[string]int `json:"requests"` // in the window, by operation
	// PerMinutePerRunner is Requests per minute of the window, per runner.
	PerMinutePerRunner        float64 `json:"per_minute_per_runner"`
	PerMinutePerRunnerClasses Classes `json:"per_minute_per_runner_by_class"`
}

// IdleClusterCost prices the idle cluster's measured requests over a month
// of Days days at the published S3 Standard prices.
type IdleClusterCost struct {
	Runners int `json:"runners"`
	Shards  int `json:"shards"`
	Days    int `json:"days"`
	// USD is the measured idle window's requests (IdleFigures: scaled up
	// when the window is short), priced.
	USD float64 `json:"usd"`
	// PerMinute is the whole cluster's idle requests per minute by class.
	PerMinute Classes `json:"per_minute_by_class"`
	Formula   string  `json:"formula"`
	// ModelUSD prices the task store's steady state by IdleModel (the
	// shards' reconcile and sweep LISTs, the runners' clock reads):
	// what a window right after the trials, while the shards' listings
	// have not backed off, or one too short to see them, does not show.
	// It leaves out coordination on S3, which only USD counts.
	ModelUSD     float64 `json:"model_usd"`
	ModelFormula string  `json:"model_formula"`
}

// idleClusterCost prices perMinute, the idle requests per minute of a
// cluster of runners runners and shards shards, over EstimateDays days.
func idleClusterCost(runners, shards int, perMinute Classes, m IdleModel) IdleClusterCost {
	minutes := float64(60 * 24 * EstimateDays)
	usd := minutes * perMinute.usdPer1000() / 1000
	hours := float64(24 * EstimateDays)
	model := hours * (float64(shards)*m.ListsPerShardHour*PricePutClass + float64(runners)*m.HeadBucketPerRunnerHour*PriceGetClass) / 1000
	return IdleClusterCost{Runners: runners, Shards: shards, Days: EstimateDays, USD: round(usd, 2), PerMinute: perMinute,
		ModelUSD: round(model, 2),
		ModelFormula: fmt.Sprintf("24 h × %d days × (%d shards × %g LIST/shard/h × $%g + %d runners × %g HeadBucket/runner/h × $%g)/1000",
			EstimateDays, shards, m.ListsPerShardHour, PricePutClass, runners, m.HeadBucketPerRunnerHour, PriceGetClass),
		Formula: fmt.Sprintf("1440 min × %d days × (PUT-class/min × $%g + GET-class/min × $%g)/1000 = 1440 × %d × (%.4g × %g + %.4g × %g)/1000",
			EstimateDays, PricePutClass, PriceGetClass, EstimateDays, perMinute.PutClass, PricePutClass, perMinute.GetClass, PriceGetClass)}
}

// IdleModel is the S3 cost model of an idle cluster at steady state, per
// owned shard (its reconciliation and retention sweep LISTs) and per
// runner (the S3 clock's HeadBucket), from the configuration. Each wait
// gets 0–10% jitter on top, so the mean wait is 1.05 × its interval.
// TestIdleS3RequestsMatchModel (entity) checks it on the wire at short
// intervals.
type IdleModel struct {
	ReconcileMaxIntervalS float64 `json:"reconcile_max_interval_s"`
	// SweepIntervalS is 0 when the retention sweep is off.
	SweepIntervalS float64 `json:"sweep_interval_s"`
	// ListsPerShardHour: 3600 / (1.05 × reconcile max) + 3600 / (1.05 ×
	// sweep interval); a shard over 1,000 task objects adds one sweep LIST
	// per 1,000.
	ListsPerShardHour float64 `json:"lists_per_shard_hour"`
	// HeadBucketPerRunnerHour: a clock read when the sample is older than
	// a minute, which the shards' loops ask for every few seconds.
	HeadBucketPerRunnerHour float64 `json:"head_bucket_per_runner_hour"`
	// MonthlyListUSD is the LISTs' cost over 30 days by shard count,
	// at $0.005 per 1,000.
	MonthlyListUSD map[string]float64 `json:"monthly_list_usd_by_shards"`
	Formula        string             `json:"formula"`
}

// idleModel computes the model for the entity configuration ec.
func idleModel(ec entity.Config) IdleModel {
	const jitter = 1.05 // mean of 1 + U[0, 0.1)
	m := IdleModel{ReconcileMaxIntervalS: ec.ReconcileMaxInterval.Seconds(), HeadBucketPerRunnerHour: 60, MonthlyListUSD: map[string]float64{}}
	m.ListsPerShardHour = 3600 / (jitter * m.ReconcileMaxIntervalS)
	if ec.TaskRetention > 0 {
		m.SweepIntervalS = ec.SweepInterval().Seconds()
		m.ListsPerShardHour += 3600 / (jitter * m.SweepIntervalS)
	}
	for _, shards := range []int{1024, 4096} {
		m.MonthlyListUSD[fmt.Sprint(shards)] = round(float64(shards)*m.ListsPerShardHour*24*EstimateDays*PricePutClass/1000, 2)
	}
	m.ListsPerShardHour = round(m.ListsPerShardHour, 3)
	m.Formula = fmt.Sprintf("LIST/shard/h = 3600/(1.05 × %gs) + 3600/(1.05 × %gs sweep, 0: off) = %g; $/month = shards × LIST/shard/h × 24 × %d × $%g/1000",
		m.ReconcileMaxIntervalS, m.SweepIntervalS, m.ListsPerShardHour, EstimateDays, PricePutClass)
	return m
}

// IdleEtcd is the etcd load of the idle cluster, counted by the etcd server
// itself (its gRPC metrics, see internal/etcdcalls): a unary call is one
// request, and so is each message on a stream (a keep-alive), not the
// stream. The runners run the product's default lease TTL for this
// scenario, whatever the bench's elsewhere.
type IdleEtcd struct {
	LeaseTTLS float64 `json:"lease_ttl_s"`
	// Requests are the window's requests by gRPC method (Range, Txn,
	// LeaseKeepAlive, Watch…); StreamsOpened the streams opened, by method.
	Requests           map[string]float64 `json:"requests"`
	StreamsOpened      map[string]float64 `json:"streams_opened,omitempty"`
	PerMinutePerRunner float64            `json:"per_minute_per_runner"`
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

// wireOps are a proxy's request counts by operation since before.
func wireOps(p *s3count.Proxy, before s3count.Counts) map[string]float64 {
	out := map[string]float64{}
	for op, n := range p.Counts().Sub(before).Requests {
		out[string(op)] = float64(n)
	}
	return out
}

// countingProxy starts a counting proxy in front of the cluster's S3
// endpoint, closed when the run ends.
func (c *cluster) countingProxy() (*s3count.Proxy, error) {
	p, err := s3count.New(c.S3.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	c.env.onClose(func() { p.Close() })
	return p, nil
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

// runS3Cost counts S3 requests on the wire: the runners reach S3 through
// one counting proxy, the submitter through another, so every request a
// bill would show is counted, SDK retries included, and split between the
// two.
func runS3Cost(ctx context.Context, e *env) (Result, error) {
	c, err := e.newCluster(ctx, ScenarioS3Cost, costShards)
	if err != nil {
		return nil, err
	}
	runnersWire, err := c.countingProxy()
	if err != nil {
		return nil, err
	}
	clientWire, err := c.countingProxy()
	if err != nil {
		return nil, err
	}
	// The product's default lease TTL (not the bench's short one), for the
	// idle etcd figure: keep-alives and lock checks follow the TTL.
	ttl := runner.DefaultConfig().Lease.TTL
	c.overrides = append(c.overrides, "s3.endpoint="+runnersWire.URL(), "lease.ttl="+ttl.Std().String())
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
	if err := c.settleListings(ctx, runnersWire, costShards, settleWithin); err != nil {
		return nil, err
	}
	tc, err := c.client(ctx, "s3.endpoint="+clientWire.URL())
	if err != nil {
		return nil, err
	}
	// A client reads the S3 server's clock (a HeadBucket) on its first
	// submit and again only when its sample is old: a cost per client, not
	// per task. Read it before the counting starts, as a long-lived
	// client's would have been.
	if _, err := tc.Store().Now(ctx); err != nil {
		return nil, fmt.Errorf("bench: s3cost: the client's first clock read: %w", err)
	}
	res := &S3CostResult{Runners: costRunners, Shards: costShards}
	n := pick(e.o, 50, 10)
	totalClient, totalRunners := map[string]float64{}, map[string]float64{}
	tasks := 0
	var loaded time.Duration
	for i := range e.trials {
		cBefore, rBefore := clientWire.Counts(), runnersWire.Counts()
		t0 := time.Now()
		done, err := completed(registries(rs), typeCost)
		if err != nil {
			return nil, err
		}
		refs := make([]string, 0, n)
		for j := range n {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			tk, _, err := tc.Submit(sctx, task.SubmitRequest{Type: typeCost, Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, j))})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("bench: s3cost: submit: %w", err)
			}
			refs = append(refs, tk.Ref())
		}
		if err := waitCompleted(ctx, rs, tc, refs, typeCost, done+float64(n), batchWithin); err != nil {
			return nil, err
		}
		// The ready pointer is deleted after the completing commit.
		if err := waitOps(ctx, runnersWire, rBefore, s3count.OpDelete, n, 10*time.Second); err != nil {
			return nil, err
		}
		loaded += time.Since(t0)
		cOps, rOps := wireOps(clientWire, cBefore), wireOps(runnersWire, rBefore)
		all := perTask(nil, cOps, n)
		addOps(all, perTask(nil, rOps, n))
		both := clientWire.Counts().Sub(cBefore).Add(runnersWire.Counts().Sub(rBefore))
		retries, failed := 0, 0
		for _, v := range both.Retries {
			retries += v
		}
		for _, v := range both.Failed {
			failed += v
		}
		var non2xx map[string]int
		for op, byStatus := range both.Status {
			for status, v := range byStatus {
				if status < 200 || status > 299 {
					if non2xx == nil {
						non2xx = map[string]int{}
					}
					non2xx[fmt.Sprintf("%s %d", op, status)] += v
				}
			}
		}
		res.Trials = append(res.Trials, S3CostTrial{Tasks: n, PerTask: all, Retries: retries, Failed: failed, Non2xx: non2xx})
		addOps(totalClient, cOps)
		addOps(totalRunners, rOps)
		tasks += n
		e.logf("s3cost: trial %d/%d: %d tasks: per task on the wire %s (retries %d, failed %d, other than 2xx %v)", i+1, e.trials, n, describeOps(all), retries, failed, non2xx)
	}
	res.PerTaskClient = perTask(nil, totalClient, tasks)
	res.PerTaskRunners = perTask(nil, totalRunners, tasks)
	both := maps.Clone(totalClient)
	addOps(both, totalRunners)
	res.PerTask = perTask(nil, both, tasks)
	res.PerTaskClasses = classesOf(res.PerTask)
	res.UnderLoad = loadFigures(totalRunners, tasks, loaded)

	window := pick(e.o, time.Minute, 5*time.Second)
	e.logf("s3cost: measuring the idle cluster's requests for %s", window)
	var etcdBefore, etcdAfter etcdcalls.Calls
	if !e.o.onS3() {
		if etcdBefore, err = etcdcalls.Now(prometheus.DefaultGatherer); err != nil {
			return nil, fmt.Errorf("bench: s3cost: %w", err)
		}
	}
	idle, err := idleRequests(ctx, rs, runnersWire, window)
	if err != nil {
		return nil, err
	}
	if !e.o.onS3() {
		if etcdAfter, err = etcdcalls.Now(prometheus.DefaultGatherer); err != nil {
			return nil, fmt.Errorf("bench: s3cost: %w", err)
		}
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
	if !e.o.onS3() {
		ie := idleEtcd(etcdAfter.Since(etcdBefore), ttl.Std(), window)
		res.Idle.Etcd = &ie
	}
	res.Idle.Model = idleModel(cfg.EntityConfig())
	res.Cost = estimate(res.PerTaskClasses, res.Idle.PerMinutePerRunnerClasses)
	wholeMin := map[string]float64{}
	for op, v := range perMin {
		wholeMin[op] = v * costRunners
	}
	res.IdleCluster = idleClusterCost(costRunners, costShards, classesOf(wholeMin), res.Idle.Model)
	return res, nil
}

// loadFigures turns the runners' requests by operation over tasks tasks
// run in window into LoadFigures.
func loadFigures(requests map[string]float64, tasks int, window time.Duration) LoadFigures {
	f := LoadFigures{WindowS: round(window.Seconds(), 3), Tasks: tasks, Requests: map[string]int{}}
	if window <= 0 {
		return f
	}
	perMin := map[string]float64{}
	total := 0.0
	for op, v := range requests {
		f.Requests[op] = int(v)
		perMin[op] = v * time.Minute.Seconds() / window.Seconds() / costRunners
		total += v
	}
	f.TasksPerS = round(float64(tasks)/window.Seconds(), 1)
	f.PerMinutePerRunner = round(total*time.Minute.Seconds()/window.Seconds()/costRunners, 1)
	f.PerMinutePerRunnerClasses = classesOf(perMin)
	return f
}

// settleListings waits for the start-up listings of the runners whose S3
// requests wire counts (see settleListings). On S3 coordination the
// runners' polls are LISTs too, never a second apart, so the listings
// are taken as done once there have been as many as shards and no shard
// lock has changed for a second: a runner lists a shard right after it
// acquires it.
func (c *cluster) settleListings(ctx context.Context, wire *s3count.Proxy, shards int, within time.Duration) error {
	if !c.env.o.onS3() {
		return settleListings(ctx, wire, shards, within)
	}
	deadline := time.Now().Add(within)
	for {
		n := wire.Counts().Requests[s3count.OpList]
		quietFor := time.Duration(0)
		if changes := c.locks.Since(time.Time{}); len(changes) > 0 {
			quietFor = time.Since(changes[len(changes)-1].At)
		}
		if n >= shards && quietFor >= time.Second {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the runners' start-up listings did not settle within %s (%d listings, shard locks unchanged for %s)", within, n, quietFor.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// settleListings waits for the listing each runner makes of each shard it
// acquires, as the runners' proxy counts them: at least one per shard,
// then none for a second, within within.
func settleListings(ctx context.Context, wire *s3count.Proxy, shards int, within time.Duration) error {
	deadline := time.Now().Add(within)
	last, since := -1, time.Now()
	for {
		if n := wire.Counts().Requests[s3count.OpList]; n != last {
			last, since = n, time.Now()
		}
		if last >= shards && time.Since(since) >= time.Second {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the runners' start-up listings did not settle within %s (%d listings)", within, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitOps waits until the proxy has seen want requests of op since before.
func waitOps(ctx context.Context, wire *s3count.Proxy, before s3count.Counts, op s3count.Op, want int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n := wire.Counts().Sub(before).Requests[op]
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d of %d %s requests after %s", n, want, op, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// idleRequests counts the runners' requests on the wire over window.
func idleRequests(ctx context.Context, rs []*inproc, wire *s3count.Proxy, window time.Duration) (map[string]float64, error) {
	before := wire.Counts()
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
	return wireOps(wire, before), nil
}

// describeOps renders per-operation figures, sorted.
func describeOps(m map[string]float64) string {
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%g", op, m[op]))
	}
	return strings.Join(parts, " ")
}

// idleEtcd turns the etcd calls of the idle window into IdleEtcd. Nothing
// else talks to the bench's etcd meanwhile: the scenarios run one after
// the other, and the bench's own watch of the locks sends nothing once
// it is open.
func idleEtcd(calls etcdcalls.Calls, ttl, window time.Duration) IdleEtcd {
	out := IdleEtcd{LeaseTTLS: ttl.Seconds(), Requests: map[string]float64{}}
	for method, m := range calls {
		out.Requests[method] = m.Requests()
		if m.Stream && m.Started > 0 {
			if out.StreamsOpened == nil {
				out.StreamsOpened = map[string]float64{}
			}
			out.StreamsOpened[method] = m.Started
		}
	}
	out.PerMinutePerRunner = round(calls.Requests()*time.Minute.Seconds()/window.Seconds()/costRunners, 2)
	return out
}
