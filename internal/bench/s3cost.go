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
