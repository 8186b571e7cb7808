package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/s3count"
	"github.com/tenurehq/tenure/runner"
)

// Durable state scenario settings.
const (
	stateShards = 8
	// stateMaxIdle passivates the measured entities quickly, for the warm
	// activations; long enough that a batch of calls to one entity never
	// sees its instance passivated in between.
	stateMaxIdle = time.Second
	// stateReconcile keeps the owners' periodic listings out of the
	// counted windows.
	stateReconcile = 10 * time.Minute
	// stateCallTimeout bounds one measured call.
	stateCallTimeout = 30 * time.Second
)

// StateResult holds the figures of the state scenario: activation and save
// latencies of the built-in durable counter, measured from the caller
// (an entity call, gRPC to the owner, on loopback), and the S3 requests
// each costs, counted on the wire between the runners and S3 by a
// counting proxy (internal/s3count).
type StateResult struct {
	Shards int `json:"shards"`
	// Cold: a call to an entity never seen (GET answered 404, then the
	// fencing create). Warm: the first call after its instance was
	// passivated, same ownership (GET). Handoff: the first call after its
	// shard moved to another runner, a new epoch (GET, then the fencing
	// replace). Save: a call that adds to a resident counter (its
	// conditional replace). Cold, warm and handoff calls read (they do not
	// save).
	Cold    StatePhase   `json:"cold_activation"`
	Warm    StatePhase   `json:"warm_activation"`
	Handoff StatePhase   `json:"handoff_activation"`
	Save    StatePhase   `json:"save"`
	Trials  []StateTrial `json:"trials"`
}

// StatePhase is one kind of call over every trial.
type StatePhase struct {
	Calls int     `json:"calls"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
	// PerCall is the S3 requests per call by operation (create and
	// replace are conditional PutObjects).
	PerCall map[string]float64 `json:"s3_per_call"`

	lat []float64
	ops map[string]float64
}

// StateTrial is one trial's per-call S3 requests by phase.
type StateTrial struct {
	Entities int                           `json:"entities"`
	PerCall  map[string]map[string]float64 `json:"s3_per_call"`
}

// runState measures durable state with the built-in counter. Each trial
// takes new entities through the four phases on one runner, then starts
// another and stops the first (a planned handoff: every shard changes
// epoch) for the handoff phase; the next trial goes on with the new one.
func runState(ctx context.Context, e *env) (Result, error) {
	c, err := e.newCluster(ctx, ScenarioState, stateShards)
	if err != nil {
		return nil, err
	}
	wire, err := c.countingProxy()
	if err != nil {
		return nil, err
	}
	c.overrides = append(c.overrides, "s3.endpoint="+wire.URL(),
		"entity.max_idle="+stateMaxIdle.String(), "entity.reconcile_interval="+stateReconcile.String())
	owner, err := c.startRunner("s1", nil)
	if err != nil {
		return nil, err
	}
	defer func() { owner.stop() }()
	if err := c.convergedAlive(ctx, []string{owner.id}, owner.failed); err != nil {
		return nil, err
	}
	if err := c.settleListings(ctx, wire, stateShards, settleWithin); err != nil {
		return nil, err
	}
	cfg, err := c.config("bench-caller")
	if err != nil {
		return nil, err
	}
	caller, err := runner.Connect(ctx, cfg, c.connectOptions()...)
	if err != nil {
		return nil, fmt.Errorf("bench: state: %w", err)
	}
	defer caller.Close()

	res := &StateResult{Shards: stateShards}
	phases := map[string]*StatePhase{"cold": &res.Cold, "warm": &res.Warm, "handoff": &res.Handoff, "save": &res.Save}
	n := pick(e.o, 40, 8)
	for i := range e.trials {
		ids := make([]string, n)
		for j := range ids {
			ids[j] = fmt.Sprintf("st-%d-%d", i, j)
		}
		tr := StateTrial{Entities: n, PerCall: map[string]map[string]float64{}}
		measure := func(phase, input string) error {
			ops, err := stateCalls(ctx, caller, wire, phases[phase], ids, input)
			tr.PerCall[phase] = perTask(nil, ops, n)
			return err
		}
		if err := measure("cold", `{}`); err != nil {
			return nil, err
		}
		if err := measure("save", `{"add":1}`); err != nil {
			return nil, err
		}
		idle, err := counters(registries([]*inproc{owner}), "tenure_entity_passivations_total", "reason", nil)
		if err != nil {
			return nil, err
		}
		if err := waitCounter(ctx, owner, "tenure_entity_passivations_total", "reason", "idle", idle["idle"]+float64(n), 30*time.Second); err != nil {
			return nil, err
		}
		if err := measure("warm", `{}`); err != nil {
			return nil, err
		}
		next, err := c.startRunner(fmt.Sprintf("s%d", i+2), nil)
		if err != nil {
			return nil, err
		}
		if err := owner.stop(); err != nil {
			next.stop()
			return nil, err
		}
		owner = next
		if err := c.convergedAlive(ctx, []string{owner.id}, owner.failed); err != nil {
			return nil, err
		}
		if err := c.settleListings(ctx, wire, stateShards, settleWithin); err != nil {
			return nil, err
		}
		idle, err = counters(registries([]*inproc{owner}), "tenure_entity_passivations_total", "reason", nil)
		if err != nil {
			return nil, err
		}
		if err := measure("handoff", `{}`); err != nil {
			return nil, err
		}
		// The next trial's warm phase counts its own passivations only.
		if err := waitCounter(ctx, owner, "tenure_entity_passivations_total", "reason", "idle", idle["idle"]+float64(n), 30*time.Second); err != nil {
			return nil, err
		}
		res.Trials = append(res.Trials, tr)
		e.logf("state: trial %d/%d: %d entities: cold %s; save %s; warm %s; handoff %s", i+1, e.trials, n,
			describeOps(tr.PerCall["cold"]), describeOps(tr.PerCall["save"]), describeOps(tr.PerCall["warm"]), describeOps(tr.PerCall["handoff"]))
	}
	for _, p := range phases {
		p.PerCall = perTask(nil, p.ops, p.Calls)
		p.P50MS, p.P99MS, p.MaxMS = round(quantile(p.lat, 0.5), 3), round(quantile(p.lat, 0.99), 3), round(maxOf(p.lat), 3)
	}
	return res, nil
}

// stateCalls calls the counter of each id once with input, one call at a
// time, and adds the latencies and the runners' S3 requests to p; it
// returns the requests of this batch.
func stateCalls(ctx context.Context, caller *runner.Client, wire *s3count.Proxy, p *StatePhase, ids []string, input string) (map[string]float64, error) {
	before := wire.Counts()
	for _, id := range ids {
		cctx, cancel := context.WithTimeout(ctx, stateCallTimeout)
		start := time.Now()
		_, err := caller.Call(cctx, runner.TypeCounter, id, []byte(input))
		d := time.Since(start)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("bench: state: call counter %s %s: %w", id, input, err)
		}
		p.lat = append(p.lat, ms(d))
	}
	ops := wireOps(wire, before)
	if p.ops == nil {
		p.ops = map[string]float64{}
	}
	addOps(p.ops, ops)
	p.Calls += len(ids)
	return ops, nil
}

// waitCounter waits until the runner's counter name{label=value} reaches
// want.
func waitCounter(ctx context.Context, x *inproc, name, label, value string, want float64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		got, err := counters(registries([]*inproc{x}), name, label, nil)
		if err != nil {
			return err
		}
		if got[value] >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: runner %s: %s{%s=%q} = %g after %s, want %g", x.id, name, label, value, got[value], within, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *StateResult) rows() []row {
	phase := func(p StatePhase) string {
		return fmt.Sprintf("p50 %.2fms, p99 %.2fms; S3 per call %s", p.P50MS, p.P99MS, describeOps(p.PerCall))
	}
	return []row{
		{"cold activation (never seen)", phase(r.Cold)},
		{"warm activation (after passivation)", phase(r.Warm)},
		{"activation after a handoff", phase(r.Handoff)},
		{"save (call that adds)", phase(r.Save)},
	}
}
