package bench

// The S3 request prices and the cost model of s3cost: requests by price
// class, the idle cluster's monthly price, the task store's idle model,
// and the monthly estimate.

import (
	"fmt"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/s3count"
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
