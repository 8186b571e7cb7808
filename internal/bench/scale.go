package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/internal/embedded"
	"github.com/tenurehq/tenure/internal/etcdcalls"
	"github.com/tenurehq/tenure/internal/s3count"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/runner"
)

// Scale scenario settings.
const (
	// DefaultScaleShards is scale's shard count.
	DefaultScaleShards = 4096
	// QuickScaleShards is scale's shard count with Quick.
	QuickScaleShards = 256
	// scalePoll is the interval of the balance check's polls.
	scalePoll = 25 * time.Millisecond
	// scaleBalanceWithin bounds a cold start or a rebalance: 30 runners
	// on 16 cores have taken 13.6s, and 60 did not converge in 120s.
	scaleBalanceWithin = 3 * time.Minute
	// scaleSettleWithin bounds the wait for the start-up listings after
	// balance.
	scaleSettleWithin = 60 * time.Second
)

// scaleBalanced says what "balanced" means, for the report.
const scaleBalanced = "every runner registered, every shard locked, and the locks (from the bench's own etcd watch) " +
	"equal to placement.Reassign over the registered runners from the current holders, the runners' own assignment code; " +
	"the time is the later of the last lock change's arrival and the first poll that saw every runner registered (polls every 25ms)"

// DefaultScaleRunners returns the runner counts scale measures by
// default: 3 and 10 on up to 4 cores, 3, 10, 30 and 60 on more, where
// 60 processes do not just measure the CPU's queue.
func DefaultScaleRunners() []int {
	if runtime.NumCPU() <= 4 {
		return []int{3, 10}
	}
	return []int{3, 10, 30, 60}
}

// QuickScaleRunners are the runner counts of scale with Quick.
var QuickScaleRunners = []int{3}

// ScaleResult holds the figures of scale: per runner count N, N `tenure
// run` processes over Shards shards: the cold start's time to a balanced
// assignment, a planned handoff (SIGTERM) and a crash (SIGKILL) of one
// runner, and the idle cluster's etcd and S3 requests per second. One
// trial per row.
type ScaleResult struct {
	Shards     int     `json:"shards"`
	LeaseTTLMS float64 `json:"lease_ttl_ms"`
	// Balanced is the cold start's end, in words.
	Balanced string `json:"balanced"`
	// EtcdCount and S3Count say how the idle requests were counted.
	EtcdCount string     `json:"etcd_count"`
	S3Count   string     `json:"s3_count"`
	Rows      []ScaleRow `json:"rows"`
}

// ScaleRow is one runner count.
type ScaleRow struct {
	Runners int `json:"runners"`
	Shards  int `json:"shards"`
	// SpawnMS is the time from the first process's start to the last's.
	SpawnMS float64 `json:"spawn_ms"`
	// ColdStartMS is the time from the first process's start to a
	// balanced assignment (see ScaleResult.Balanced).
	ColdStartMS float64 `json:"cold_start_ms"`
	// ColdStartLockChanges counts the lock holder changes until then:
	// Shards when no shard moved twice.
	ColdStartLockChanges int            `json:"cold_start_lock_changes"`
	PerRunner            map[string]int `json:"shards_per_runner"`
	Idle                 ScaleIdle      `json:"idle"`
	Handoff              ScaleFault     `json:"handoff"`
	Crash                ScaleFault     `json:"crash"`
}

// ScaleFault is one runner signalled: the time until every shard it held
// is locked by another runner, as the bench's lock watch saw it.
type ScaleFault struct {
	Signal    string  `json:"signal"`
	Victim    string  `json:"victim"`
	Shards    int     `json:"shards"` // the victim held
	ReownedMS float64 `json:"reowned_ms"`
	XTTL      float64 `json:"x_ttl"`
	// RebalancedMS (handoff only): signal → balanced again over the
	// others.
	RebalancedMS float64 `json:"rebalanced_ms,omitempty"`
	ExitCode     int     `json:"exit_code"` // -1: killed by the signal
}

// ScaleIdle is the balanced cluster's requests over the idle window,
// every runner together.
type ScaleIdle struct {
	WindowS float64 `json:"window_s"`
	// NoEtcd: the runners coordinate on S3, with no etcd; their
	// coordination requests are among S3Requests.
	NoEtcd bool `json:"no_etcd,omitempty"`
	// Etcd* are nil when the etcd server is not embedded in this process
	// (Options.Infra pointing elsewhere): its counters are not readable.
	EtcdPerS          *float64           `json:"etcd_requests_per_s"`
	EtcdPerSPerRunner *float64           `json:"etcd_requests_per_s_per_runner"`
	EtcdRequests      map[string]float64 `json:"etcd_requests,omitempty"` // by gRPC method
	S3PerS            float64            `json:"s3_requests_per_s"`
	S3PerSPerRunner   float64            `json:"s3_requests_per_s_per_runner"`
	S3Requests        map[string]float64 `json:"s3_requests,omitempty"` // by operation
	// ReconcileListsPerS is the idle steady state's periodic LISTs per
	// second by the cost model (IdleModel: each shard's reconciliation,
	// backed off to its maximum interval, and its retention sweep). The
	// window does not see that state: after an acquisition a shard lists
	// again a reconcile interval later, then backs off, doubling, over
	// about two hours; a window after a short cold start sees few or
	// none.
	ReconcileListsPerS float64 `json:"model_reconcile_lists_per_s"`
}

// scaleSettings are scale's parameters in force.
type scaleSettings struct {
	runners []int
	shards  int
	ttl     time.Duration
	idle    time.Duration
}

func (e *env) scaleSettings() scaleSettings {
	s := scaleSettings{runners: e.o.ScaleRunners, shards: e.o.ScaleShards,
		// The product's default lease TTL for the full run, so that the
		// crash and the idle etcd load are the product's; the bench's
		// short one with Quick, so that the crash trial takes seconds.
		ttl:  pick(e.o, runner.DefaultConfig().Lease.TTL.Std(), LeaseTTL),
		idle: pick(e.o, 30*time.Second, 5*time.Second)}
	if len(s.runners) == 0 {
		s.runners = pick(e.o, DefaultScaleRunners(), QuickScaleRunners)
	}
	if s.shards == 0 {
		s.shards = pick(e.o, DefaultScaleShards, QuickScaleShards)
	}
	return s
}

func runScale(ctx context.Context, e *env) (Result, error) {
	s := e.scaleSettings()
	res := &ScaleResult{Shards: s.shards, LeaseTTLMS: ms(s.ttl), Balanced: scaleBalanced,
		EtcdCount: "the embedded etcd server's own gRPC counters (grpc_server_started_total, grpc_server_msg_received_total): a unary call or a stream message is one request",
		S3Count:   "on the wire, by a counting proxy (internal/s3count) between the runners and S3; SDK retries count"}
	ports := &portAlloc{used: map[string]bool{}}
	for _, n := range s.runners {
		row, err := scaleRow(ctx, e, s, n, ports)
		if err != nil {
			return nil, fmt.Errorf("bench: scale, %d runners: %w", n, err)
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// scaleRow measures one runner count on a fresh cluster, and kills its
// runners at the end: the cluster is not used again.
func scaleRow(ctx context.Context, e *env, s scaleSettings, n int, ports *portAlloc) (ScaleRow, error) {
	row := ScaleRow{Runners: n, Shards: s.shards}
	c, err := e.newCluster(ctx, ScenarioScale, s.shards)
	if err != nil {
		return row, err
	}
	wire, err := c.countingProxy()
	if err != nil {
		return row, err
	}
	c.overrides = append(c.overrides, "s3.endpoint="+wire.URL(), "lease.ttl="+s.ttl.String())
	cfg, err := c.config("bench-client")
	if err != nil {
		return row, err
	}
	ids := make([]string, n)
	extras := make([][]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i+1)
		// Every listener's address is chosen here, below the ephemeral
		// range and distinct from every other one handed out: with "port
		// 0" listeners, a runner's admin port could be taken by another's
		// call listener before it binds (a 60-runner run lost a runner so).
		admin, err := ports.addr()
		if err != nil {
			return row, err
		}
		call, err := ports.addr()
		if err != nil {
			return row, err
		}
		extras[i] = []string{"admin_addr=" + admin, "call.addr=" + call}
	}
	procs := map[string]*child{}
	defer killAll(procs)
	e.logf("scale: starting %d runner processes over %d shards", n, s.shards)
	t0 := time.Now()
	for i, id := range ids {
		if procs[id], err = c.startChild(id, extras[i]...); err != nil {
			return row, err
		}
	}
	row.SpawnMS = ms(time.Since(t0))
	at, err := c.awaitBalanced(ctx, ids, procs, t0)
	if err != nil {
		return row, fmt.Errorf("cold start: %w", err)
	}
	row.ColdStartMS = ms(at.Sub(t0))
	row.ColdStartLockChanges = len(c.locks.Since(t0))
	holders := c.locks.Holders()
	row.PerRunner = map[string]int{}
	for _, h := range holders {
		row.PerRunner[h]++
	}
	e.logf("scale: %d runners: balanced %.0fms after the first start (processes started in %.0fms, %d lock changes): %s",
		n, row.ColdStartMS, row.SpawnMS, row.ColdStartLockChanges, describeCounts(row.PerRunner))

	// Every shard is listed when it is acquired: the window starts once
	// there have been as many listings as shards. It does not wait for
	// the listings to stop: after a cold start longer than the reconcile
	// interval, the first-acquired shards' periodic listings have begun,
	// and they are part of the idle cluster's load.
	if err := waitOps(ctx, wire, s3count.Counts{}, s3count.OpList, s.shards, scaleSettleWithin); err != nil {
		return row, fmt.Errorf("the start-up listings: %w", err)
	}
	if row.Idle, err = scaleIdle(ctx, s, wire, procs, n, e.o.onS3()); err != nil {
		return row, err
	}
	row.Idle.ReconcileListsPerS = round(float64(s.shards)*idleModel(cfg.EntityConfig()).ListsPerShardHour/3600, 2)
	e.logf("scale: %d runners idle for %s: S3 %.2f requests/s %s; etcd %s", n, s.idle, row.Idle.S3PerS,
		describeOps(row.Idle.S3Requests), describeEtcdRate(row.Idle))

	// Planned handoff: the first runner stops; then, once the others are
	// balanced again, the second crashes.
	rest := map[string]*child{}
	maps.Copy(rest, procs)
	delete(rest, ids[0])
	var signalled time.Time
	if row.Handoff, signalled, err = c.scaleFault(ctx, procs[ids[0]], syscall.SIGTERM, handoffWithin, s.ttl); err != nil {
		return row, err
	}
	bal, err := c.awaitBalanced(ctx, ids[1:], rest, signalled)
	if err != nil {
		return row, fmt.Errorf("rebalance after SIGTERM: %w", err)
	}
	row.Handoff.RebalancedMS = ms(bal.Sub(signalled))
	if row.Crash, _, err = c.scaleFault(ctx, procs[ids[1]], syscall.SIGKILL, 10*s.ttl, s.ttl); err != nil {
		return row, err
	}
	e.logf("scale: %d runners: SIGTERM %s: %d shards re-owned in %.0fms, balanced again in %.0fms; SIGKILL %s: %d shards re-owned in %.0fms (%.2f×TTL)",
		n, row.Handoff.Victim, row.Handoff.Shards, row.Handoff.ReownedMS, row.Handoff.RebalancedMS,
		row.Crash.Victim, row.Crash.Shards, row.Crash.ReownedMS, row.Crash.XTTL)
	return row, nil
}

// scaleFault signals ch and times the move of its shards to the others;
// it returns the figures and the signal's time.
func (c *cluster) scaleFault(ctx context.Context, ch *child, sig syscall.Signal, within, ttl time.Duration) (f ScaleFault, t0 time.Time, err error) {
	f = ScaleFault{Signal: signalName(sig), Victim: ch.id}
	theirs := heldBy(c.locks.Holders(), ch.id)
	if len(theirs) == 0 {
		return f, t0, fmt.Errorf("bench: scale: runner %s holds no shard", ch.id)
	}
	f.Shards = len(theirs)
	t0 = time.Now()
	if err := ch.signal(sig); err != nil {
		return f, t0, err
	}
	at, err := c.awaitReowned(ctx, ch.id, theirs, within)
	if err != nil {
		return f, t0, fmt.Errorf("bench: scale %s: %w", f.Signal, err)
	}
	if f.ExitCode, err = ch.wait(ctx, exitWithin); err != nil {
		return f, t0, err
	}
	if sig == syscall.SIGTERM && f.ExitCode != 0 {
		return f, t0, fmt.Errorf("bench: scale: runner %s exited with code %d after SIGTERM, want 0 (log %s)", ch.id, f.ExitCode, ch.logPath)
	}
	d := at.Sub(t0)
	f.ReownedMS, f.XTTL = ms(d), round(float64(d)/float64(ttl), 3)
	return f, t0, nil
}

// awaitBalanced waits for the runners want (and only they) to be
// registered and to lock every shard as their assignment gives it, reading
// the registrations from etcd and the locks from the bench's watch, and
// returns when that came about (see scaleBalanced); it fails early when a
// process of procs exits.
func (c *cluster) awaitBalanced(ctx context.Context, want []string, procs map[string]*child, from time.Time) (time.Time, error) {
	want = slices.Sorted(slices.Values(want))
	var registered time.Time
	err := harness.Await(ctx, scaleBalanceWithin, c.pollEvery(scalePoll), func() (bool, string, error) {
		if err := childrenAlive(procs); err != nil {
			return false, "", err
		}
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		runners, _, err := c.store.Runners(rctx)
		cancel()
		if err != nil {
			return c.readFailed("the runners", err)
		}
		cands, why := registeredAs(runners, want)
		if why != "" {
			return false, why, nil
		}
		if registered.IsZero() {
			registered = time.Now()
		}
		ok, why := c.assigned(cands, c.locks.Holders())
		return ok, why, nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("bench: cluster %s did not balance: %w", c.Name, err)
	}
	at := registered
	if changes := c.locks.Since(from); len(changes) > 0 && changes[len(changes)-1].At.After(at) {
		at = changes[len(changes)-1].At
	}
	return at, nil
}

// scaleIdle counts the n runners' etcd and S3 requests over the idle
// window. Nothing else talks to etcd meanwhile: the bench's lock watch
// only receives, and the balance polls have ended.
func scaleIdle(ctx context.Context, s scaleSettings, wire *s3count.Proxy, procs map[string]*child, n int, onS3 bool) (ScaleIdle, error) {
	out := ScaleIdle{WindowS: s.idle.Seconds(), NoEtcd: onS3}
	var etcdBefore etcdcalls.Calls
	counted := false
	if !onS3 {
		var err error
		etcdBefore, err = etcdcalls.Now(prometheus.DefaultGatherer)
		counted = err == nil
		if err != nil && !errors.Is(err, etcdcalls.ErrNoMetrics) {
			return out, fmt.Errorf("bench: scale: %w", err)
		}
	}
	s3Before := wire.Counts()
	t0 := time.Now()
	select {
	case <-time.After(s.idle): // the measurement window itself
	case <-ctx.Done():
		return out, ctx.Err()
	}
	if err := childrenAlive(procs); err != nil {
		return out, err
	}
	window := time.Since(t0).Seconds()
	out.S3Requests = map[string]float64{}
	total := 0.0
	for op, v := range wire.Counts().Sub(s3Before).Requests {
		out.S3Requests[string(op)] = float64(v)
		total += float64(v)
	}
	out.S3PerS = round(total/window, 3)
	out.S3PerSPerRunner = round(total/window/float64(n), 3)
	if counted {
		after, err := etcdcalls.Now(prometheus.DefaultGatherer)
		if err != nil {
			return out, fmt.Errorf("bench: scale: %w", err)
		}
		calls := after.Since(etcdBefore)
		out.EtcdRequests = map[string]float64{}
		for method, m := range calls {
			if r := m.Requests(); r != 0 {
				out.EtcdRequests[method] = r
			}
		}
		perS, perRunner := round(calls.Requests()/window, 3), round(calls.Requests()/window/float64(n), 3)
		out.EtcdPerS, out.EtcdPerSPerRunner = &perS, &perRunner
	}
	return out, nil
}

// describeEtcdRate renders the idle etcd figure.
func describeEtcdRate(i ScaleIdle) string {
	if i.NoEtcd {
		return "none: coordination on S3 (its requests are in idle S3)"
	}
	if i.EtcdPerS == nil {
		return "not counted (etcd is not embedded in this process)"
	}
	return fmt.Sprintf("%.2f requests/s (%.3f/runner) %s", *i.EtcdPerS, *i.EtcdPerSPerRunner, describeOps(i.EtcdRequests))
}

// killAll kills the processes still running and reaps them.
func killAll(procs map[string]*child) {
	for _, ch := range procs {
		if !ch.exited() {
			ch.cmd.Process.Kill()
		}
	}
	for _, ch := range procs {
		<-ch.done
	}
}

// portAlloc hands out loopback addresses for the runners' listeners:
// below the ephemeral port range (embedded.FreeStableAddr), where no
// port-0 listener or outgoing connection takes them, and never the same
// one twice.
type portAlloc struct {
	mu   sync.Mutex
	used map[string]bool
}

func (p *portAlloc) addr() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range 100 {
		a, err := embedded.FreeStableAddr()
		if err != nil {
			return "", fmt.Errorf("bench: scale: %w", err)
		}
		if !p.used[a] {
			p.used[a] = true
			return a, nil
		}
	}
	return "", fmt.Errorf("bench: scale: no address not handed out already in 100 tries (%d handed out)", len(p.used))
}

func (r *ScaleResult) rows() []row {
	out := []row{{"settings", fmt.Sprintf("%d shards, lease TTL %gms, runner processes started at once", r.Shards, r.LeaseTTLMS)}}
	for _, x := range r.Rows {
		p := fmt.Sprintf("%d runners: ", x.Runners)
		out = append(out,
			row{p + "cold start → balanced", fmt.Sprintf("%.0fms (processes started in %.0fms, %d lock changes)", x.ColdStartMS, x.SpawnMS, x.ColdStartLockChanges)},
			row{p + "SIGTERM → re-owned", fmt.Sprintf("%.0fms (%d shards of %s; balanced again %.0fms)", x.Handoff.ReownedMS, x.Handoff.Shards, x.Handoff.Victim, x.Handoff.RebalancedMS)},
			row{p + "SIGKILL → re-owned", fmt.Sprintf("%.0fms = %.2f×TTL (%d shards of %s)", x.Crash.ReownedMS, x.Crash.XTTL, x.Crash.Shards, x.Crash.Victim)},
			row{p + "idle etcd", describeEtcdRate(x.Idle)},
			row{p + "idle S3", fmt.Sprintf("%.2f requests/s (%.3f/runner, window %gs) %s; steady-state reconcile LISTs by the model %.1f/s",
				x.Idle.S3PerS, x.Idle.S3PerSPerRunner, x.Idle.WindowS, describeOps(x.Idle.S3Requests), x.Idle.ReconcileListsPerS)},
		)
	}
	return out
}
