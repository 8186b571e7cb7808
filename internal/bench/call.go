package bench

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

// Call scenario settings.
const (
	callShards = 64
	// callEntities is the number of echo entity ids, spread over the three
	// runners by their shards.
	callEntities = 1000
	// faultCallers is the number of callers of the handoff and crash
	// trials.
	faultCallers = 64
	// callerID is the in-process runner whose client calls; callees are
	// the runner processes.
	callerID = "c1"
	// followWithin bounds a fault trial's wait for every entity of the
	// victim to answer again.
	followWithin = 10 * LeaseTTL
)

var calleeIDs = []string{"c2", "c3"}

// CallResult holds the figures of call: a closed loop of callers in one
// runner's process calling echo entities through its Runner.Client, on the
// entities of the two runner processes (remote) or of the caller's own
// runner (local); then the same loop over every entity while one runner
// process is stopped (handoff, SIGTERM) or killed (crash, SIGKILL).
// Latencies are the caller's wall clock around each call.
type CallResult struct {
	Runners    int     `json:"runners"`
	Shards     int     `json:"shards"`
	Entities   int     `json:"entities"`
	WarmupMS   float64 `json:"warmup_ms"`
	MeasureMS  float64 `json:"measure_ms"`
	LeaseTTLMS float64 `json:"lease_ttl_ms"`
	// Paths are the figures per (path, callers).
	Paths   []CallPath `json:"paths"`
	Handoff *CallFault `json:"handoff"`
	Crash   *CallFault `json:"crash"`
}

// CallPath is one closed loop: callers concurrent callers on the remote or
// the local entities for the measured window, after the warm-up.
type CallPath struct {
	Path     string `json:"path"` // "remote" or "local"
	Callers  int    `json:"callers"`
	Entities int    `json:"entities"`
	// Calls is the number of calls that returned in the measured window.
	Calls     int64   `json:"calls"`
	CallsPerS float64 `json:"calls_per_s"`
	P50US     float64 `json:"p50_us"`
	P99US     float64 `json:"p99_us"`
	MaxUS     float64 `json:"max_us"`
	// Errors counts every error the callers saw, warm-up included.
	Errors int64 `json:"errors"`
	// FirstError is an example, when there were errors.
	FirstError string `json:"first_error,omitempty"`
}

// CallFault holds the trials of one fault under faultCallers callers over
// every entity.
type CallFault struct {
	Signal  string `json:"signal"`
	Callers int    `json:"callers"`
	// Errors is the sum over the trials, by kind: timeout, unknown (the
	// request was sent and the connection broke), other.
	Errors      map[string]int64 `json:"errors"`
	ErrorsTotal int64            `json:"errors_total"`
	// MaxLatencyMS is the longest call that returned after a signal.
	MaxLatencyMS float64 `json:"max_latency_ms"`
	// Unavailable*: per entity of a victim, from the signal to the end of
	// its first successful call started after it, over every trial (crash
	// only; the target is within lease TTL + 0.5s).
	UnavailableMedianMS float64           `json:"unavailable_median_ms,omitempty"`
	UnavailableMaxMS    float64           `json:"unavailable_max_ms,omitempty"`
	TargetMS            float64           `json:"target_ms,omitempty"`
	Trials              []CallFaultTrial  `json:"trials"`
	FirstErrors         map[string]string `json:"first_errors,omitempty"`
	gaps                []float64         // every trial's unavailability, ms
}

// CallFaultTrial is one signal.
type CallFaultTrial struct {
	Victim   string `json:"victim"`
	Shards   int    `json:"shards"`   // the victim held
	Entities int    `json:"entities"` // the victim owned
	// Calls returned after the signal, until every entity of the victim
	// answered again.
	Calls        int64            `json:"calls"`
	Errors       map[string]int64 `json:"errors"` // since the trial's loop started
	MaxLatencyMS float64          `json:"max_latency_ms"`
	P99LatencyMS float64          `json:"p99_latency_ms"`
	// ReownedMS: signal → the victim's shards all locked by the others, as
	// the bench's lock watch saw it.
	ReownedMS           float64            `json:"reowned_ms"`
	UnavailableMedianMS float64            `json:"unavailable_median_ms,omitempty"`
	UnavailableMaxMS    float64            `json:"unavailable_max_ms,omitempty"`
	Reroutes            map[string]float64 `json:"reroutes,omitempty"` // by reason, the caller's runner's counter
	// ErrorMessages are the first and the last error of each kind.
	ErrorMessages map[string]string `json:"error_messages,omitempty"`
}

// callRun is the call scenario's cluster: the caller runner in this
// process and the callee runner processes.
type callRun struct {
	e       *env
	c       *cluster
	caller  *inproc
	client  *runner.Client
	procs   map[string]*child
	ids     []string
	warmup  time.Duration
	measure time.Duration
}

// startCall starts the caller runner and the callee processes and waits
// for the cluster to converge; stop stops them.
func startCall(ctx context.Context, e *env) (*callRun, error) {
	c, err := e.newCluster(ctx, ScenarioCall, callShards)
	if err != nil {
		return nil, err
	}
	cr := &callRun{e: e, c: c, procs: map[string]*child{},
		warmup: pick(e.o, time.Second, 200*time.Millisecond), measure: pick(e.o, 5*time.Second, time.Second)}
	if cr.caller, err = c.startRunner(callerID, nil); err != nil {
		return nil, err
	}
	for _, id := range calleeIDs {
		if cr.procs[id], err = c.startChild(id); err != nil {
			cr.stop()
			return nil, err
		}
	}
	if err := cr.converged(ctx); err != nil {
		cr.stop()
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	cr.client, err = cr.caller.r.Client(cctx)
	cancel()
	if err != nil {
		cr.stop()
		return nil, fmt.Errorf("bench: call: client of runner %s: %w", callerID, err)
	}
	for i := range callEntities {
		cr.ids = append(cr.ids, fmt.Sprintf("e%d", i))
	}
	return cr, nil
}

// stop stops the runners gracefully.
func (cr *callRun) stop() {
	stopChildren(cr.procs)
	cr.caller.stop()
}

func runCall(ctx context.Context, e *env) (Result, error) {
	cr, err := startCall(ctx, e)
	if err != nil {
		return nil, err
	}
	defer cr.stop()
	c := cr.c
	res := &CallResult{Runners: 1 + len(calleeIDs), Shards: callShards, Entities: callEntities,
		WarmupMS: ms(cr.warmup), MeasureMS: ms(cr.measure), LeaseTTLMS: ms(LeaseTTL)}
	for _, path := range []string{"remote", "local"} {
		for _, callers := range pick(e.o, []int{1, 16, 64}, []int{1, 16}) {
			p, err := cr.path(ctx, path, callers)
			if err != nil {
				return nil, err
			}
			res.Paths = append(res.Paths, p)
			e.logf("call: %s, %d callers: %.0f calls/s, p50 %.0fµs, p99 %.0fµs, max %.0fµs, %d errors",
				path, callers, p.CallsPerS, p.P50US, p.P99US, p.MaxUS, p.Errors)
		}
	}
	res.Handoff = &CallFault{Signal: signalName(syscall.SIGTERM), Callers: faultCallers}
	res.Crash = &CallFault{Signal: signalName(syscall.SIGKILL), Callers: faultCallers, TargetMS: ms(LeaseTTL + 500*time.Millisecond)}
	faults := []*CallFault{res.Handoff, res.Crash}
	n := 0
	for fi, f := range faults {
		sig := syscall.SIGTERM
		if f == res.Crash {
			sig = syscall.SIGKILL
		}
		for i := range e.trials {
			victim := calleeIDs[n%len(calleeIDs)]
			n++
			tr, err := cr.fault(ctx, f, victim, sig)
			if err != nil {
				return nil, fmt.Errorf("bench: call %s trial %d: %w", f.Signal, i+1, err)
			}
			line := fmt.Sprintf("call: %s trial %d/%d: %s (%d entities): %d errors %s, max call %.1fms, shards re-owned in %.1fms",
				f.Signal, i+1, e.trials, victim, tr.Entities, sum(tr.Errors), describeErrors(tr.Errors), tr.MaxLatencyMS, tr.ReownedMS)
			if sig == syscall.SIGKILL {
				line += fmt.Sprintf(", entities unavailable median %.1fms, max %.1fms", tr.UnavailableMedianMS, tr.UnavailableMaxMS)
			}
			e.logf("%s", line)
			if fi == len(faults)-1 && i == e.trials-1 {
				break
			}
			if cr.procs[victim], err = c.startChild(victim); err != nil {
				return nil, err
			}
			if err := cr.converged(ctx); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

// converged waits for the three runners to hold the shards as assigned.
func (cr *callRun) converged(ctx context.Context) error {
	return cr.c.convergedAlive(ctx, append([]string{callerID}, calleeIDs...), func() error {
		if err := cr.caller.failed(); err != nil {
			return err
		}
		return childrenAlive(cr.procs)
	})
}

// owned returns the ids whose shard owner holds now (any of the callees
// when owner is "").
func (cr *callRun) owned(holders map[storage.ShardID]string, owner string) []string {
	var out []string
	for _, id := range cr.ids {
		h := holders[shardOf(id)]
		if h == owner || owner == "" && h != callerID && h != "" {
			out = append(out, id)
		}
	}
	return out
}

// shardOf is the shard of the echo entity id.
func shardOf(id string) storage.ShardID {
	return task.ShardOf(storage.DefaultGroup, callShards, runner.TypeEcho, id, "")
}

// path measures one closed loop of callers on the remote or local entities.
func (cr *callRun) path(ctx context.Context, path string, callers int) (CallPath, error) {
	owner := ""
	if path == "local" {
		owner = callerID
	}
	ids := cr.owned(cr.c.locks.Holders(), owner)
	if len(ids) == 0 {
		return CallPath{}, fmt.Errorf("bench: call: no %s entity among %d ids", path, len(cr.ids))
	}
	l := startLoop(ctx, cr.client, runner.TypeEcho, ids, callers)
	if err := waitFor(ctx, cr.warmup); err != nil {
		l.stop()
		return CallPath{}, err
	}
	from := l.record()
	err := waitFor(ctx, cr.measure)
	ss, to := l.stop()
	if err != nil {
		return CallPath{}, err
	}
	ss = between(ss, from, to)
	us := latencies(ss)
	errs, msgs := l.errors()
	p := CallPath{Path: path, Callers: callers, Entities: len(ids), Calls: int64(len(ss)),
		CallsPerS: round(float64(len(ss))/time.Duration(to-from).Seconds(), 1),
		P50US:     round(quantile(us, 0.5), 1), P99US: round(quantile(us, 0.99), 1), MaxUS: round(maxOf(us), 1),
		Errors: sum(errs)}
	for _, k := range kindNames[kindTimeout:] {
		if m, ok := msgs[k]; ok && p.FirstError == "" {
			p.FirstError = m
		}
	}
	return p, nil
}

// fault runs one trial: the loop over every entity, a warm-up, then sig
// to victim; it ends once every entity the victim owned has answered a
// call started after the signal (crash) or after its shards were re-owned
// (handoff), and the victim has exited.
func (cr *callRun) fault(ctx context.Context, f *CallFault, victim string, sig syscall.Signal) (CallFaultTrial, error) {
	holders := cr.c.locks.Holders()
	theirs := heldBy(holders, victim)
	want := make([]bool, len(cr.ids))
	tr := CallFaultTrial{Victim: victim, Shards: len(theirs)}
	for i, id := range cr.ids {
		if holders[shardOf(id)] == victim {
			want[i] = true
			tr.Entities++
		}
	}
	if tr.Entities == 0 {
		return tr, fmt.Errorf("runner %s owns none of the %d entities", victim, len(cr.ids))
	}
	regs := registries([]*inproc{cr.caller})
	before, err := counters(regs, "tenure_call_reroutes_total", "reason", nil)
	if err != nil {
		return tr, err
	}
	l := startLoop(ctx, cr.client, runner.TypeEcho, cr.ids, faultCallers)
	stopped := false
	defer func() {
		if !stopped {
			l.stop()
		}
	}()
	if err := waitFor(ctx, cr.warmup); err != nil {
		return tr, err
	}
	t0 := time.Now()
	from := l.record()
	if sig == syscall.SIGKILL {
		l.track.Store(newTracker(from, want))
	}
	if err := cr.procs[victim].signal(sig); err != nil {
		return tr, err
	}
	at, err := cr.c.awaitReowned(ctx, victim, theirs, followWithin)
	if err != nil {
		return tr, err
	}
	tr.ReownedMS = ms(at.Sub(t0))
	if sig == syscall.SIGTERM {
		l.track.Store(newTracker(from+int64(at.Sub(t0)), want))
	}
	select {
	case <-l.track.Load().done:
	case <-time.After(followWithin):
		return tr, fmt.Errorf("not every entity of %s answered within %s of its shards' move", victim, followWithin)
	case <-ctx.Done():
		return tr, ctx.Err()
	}
	code, err := cr.procs[victim].wait(ctx, exitWithin)
	if err != nil {
		return tr, err
	}
	if sig == syscall.SIGTERM && code != 0 {
		return tr, fmt.Errorf("runner %s exited with code %d after SIGTERM, want 0 (log %s)", victim, code, cr.procs[victim].logPath)
	}
	ss, to := l.stop()
	stopped = true
	ss = between(ss, from, to)
	us := latencies(ss)
	tr.Calls = int64(len(ss))
	tr.Errors, tr.ErrorMessages = l.errors()
	tr.MaxLatencyMS, tr.P99LatencyMS = round(maxOf(us)/1e3, 3), round(quantile(us, 0.99)/1e3, 3)
	var gaps []float64
	if sig == syscall.SIGKILL {
		gaps = l.track.Load().gaps()
		tr.UnavailableMedianMS, tr.UnavailableMaxMS = round(median(gaps), 3), maxOf(gaps)
	}
	after, err := counters(regs, "tenure_call_reroutes_total", "reason", nil)
	if err != nil {
		return tr, err
	}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			if tr.Reroutes == nil {
				tr.Reroutes = map[string]float64{}
			}
			tr.Reroutes[k] = d
		}
	}
	f.add(tr, gaps)
	return tr, nil
}

// add adds a trial's figures: its errors (with the first message of each
// kind), its longest call and its entities' unavailability.
func (f *CallFault) add(tr CallFaultTrial, gaps []float64) {
	if f.Errors == nil {
		f.Errors, f.FirstErrors = map[string]int64{}, map[string]string{}
	}
	for k, v := range tr.Errors {
		f.Errors[k] += v
	}
	for k, m := range tr.ErrorMessages {
		if _, ok := f.FirstErrors[k]; !ok && !strings.HasSuffix(k, " (last)") {
			f.FirstErrors[k] = m
		}
	}
	f.ErrorsTotal = sum(f.Errors)
	f.MaxLatencyMS = max(f.MaxLatencyMS, tr.MaxLatencyMS)
	f.Trials = append(f.Trials, tr)
	f.gaps = append(f.gaps, gaps...)
	if len(f.gaps) > 0 {
		f.UnavailableMedianMS, f.UnavailableMaxMS = round(median(f.gaps), 3), maxOf(f.gaps)
	}
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// waitFor waits d, or until ctx ends: a measured window, not a
// synchronisation.
func waitFor(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *CallResult) rows() []row {
	var out []row
	for _, p := range r.Paths {
		out = append(out, row{fmt.Sprintf("%s, %d callers", p.Path, p.Callers),
			fmt.Sprintf("%.0f calls/s, p50 %.0fµs, p99 %.0fµs, max %.0fµs, %d errors", p.CallsPerS, p.P50US, p.P99US, p.MaxUS, p.Errors)})
	}
	if f := r.Handoff; f != nil {
		out = append(out, row{fmt.Sprintf("handoff (%s, %d callers)", f.Signal, f.Callers),
			fmt.Sprintf("%d errors %s, max call %.1fms, %d trials", f.ErrorsTotal, describeErrors(f.Errors), f.MaxLatencyMS, len(f.Trials))})
	}
	if f := r.Crash; f != nil {
		out = append(out, row{fmt.Sprintf("crash (%s, %d callers)", f.Signal, f.Callers),
			fmt.Sprintf("%d errors %s, max call %.1fms, %d trials", f.ErrorsTotal, describeErrors(f.Errors), f.MaxLatencyMS, len(f.Trials))},
			row{"crash: entity unavailable", fmt.Sprintf("median %.1fms, max %.1fms (target %gms: TTL + 0.5s)", f.UnavailableMedianMS, f.UnavailableMaxMS, f.TargetMS)})
	}
	out = append(out, row{"setup", fmt.Sprintf("%d runners (callers in one, two processes), %d shards, %d echo entities, %gms warm-up, %gms measured",
		r.Runners, r.Shards, r.Entities, r.WarmupMS, r.MeasureMS)})
	return out
}

// describeErrors renders errors by kind, sorted: "(timeout 0, unknown 2, other 0)".
func describeErrors(m map[string]int64) string {
	parts := make([]string, 0, len(m))
	for k := kindTimeout; k < numKinds; k++ {
		parts = append(parts, fmt.Sprintf("%s %d", kindNames[k], m[kindNames[k]]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
