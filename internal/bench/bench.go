package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Result is one scenario's figures: a *HandoverResult (failover,
// handoff), *DetachResult, *ThroughputResult, *LatencyResult,
// *S3CostResult, *AssignResult, *CallResult, *StateResult or
// *ScaleResult; or a *SkippedResult for a scenario the run's coordination
// backend does not have. Each has a "trials" list, but for scale's "rows" (one per
// runner count).
type Result interface {
	// rows summarises the figures for the table.
	rows() []row
}

type row struct{ name, value string }

// Report is a run's output: the machine, the settings and every
// scenario's figures.
type Report struct {
	Machine   Machine           `json:"machine"`
	Version   string            `json:"version"`
	Started   time.Time         `json:"started"`
	DurationS float64           `json:"duration_s"`
	Settings  Settings          `json:"settings"`
	Scenarios map[string]Result `json:"scenarios"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPUModel   string `json:"cpu_model,omitempty"`
	// LoadAvg1m and LoadAvg1mEnd are the 1-minute load averages when the
	// run started and ended: other work on the machine skews every figure.
	LoadAvg1m    float64 `json:"load_avg_1m,omitempty"`
	LoadAvg1mEnd float64 `json:"load_avg_1m_end,omitempty"`
	Go           string  `json:"go"`
	OS           string  `json:"os"`
	Arch         string  `json:"arch"`
}

// Settings are the run's parameters.
type Settings struct {
	Trials     int     `json:"trials"`
	Quick      bool    `json:"quick"`
	LeaseTTLMS float64 `json:"lease_ttl_ms"`
	// S3Latency is the simulated round trip on the runners' and
	// submitters' S3 requests (--s3-latency), if any.
	S3Latency *S3Latency `json:"s3_latency,omitempty"`
	// Coordination is the runners' coordination backend: etcd or s3.
	Coordination string `json:"coordination"`
	Etcd         string `json:"etcd"`
	S3           string `json:"s3"`
}

// scenarioFuncs runs each scenario.
var scenarioFuncs = map[string]func(context.Context, *env) (Result, error){
	ScenarioFailover:       runFailover,
	ScenarioHandoff:        runHandoff,
	ScenarioDetach:         runDetach,
	ScenarioThroughput:     runThroughput,
	ScenarioLatency:        runLatency,
	ScenarioLatencyProfile: runLatencyProfile,
	ScenarioS3Cost:         runS3Cost,
	ScenarioRenewal:        runRenewal,
	ScenarioAssign:         runAssign,
	ScenarioCall:           runCall,
	ScenarioState:          runState,
	ScenarioScale:          runScale,
}

// Run runs the selected scenarios one after the other and returns their
// figures. On an error (or when ctx ends) it stops, returns the figures of
// the scenarios that completed with the error, and keeps the data
// directory for its logs. Everything it started is stopped before it
// returns.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	names, _ := o.scenarios()
	e, err := newEnv(o)
	if err != nil {
		return nil, err
	}
	defer func() {
		e.close(err != nil)
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("bench: interrupted: %w", err)
		}
		if err != nil {
			err = fmt.Errorf("%w (logs in %s)", err, e.logDir())
		}
	}()
	rep = &Report{
		Machine: machine(),
		Version: o.Version,
		Started: time.Now().UTC().Truncate(time.Second),
		Settings: Settings{Trials: e.trials, Quick: o.Quick, LeaseTTLMS: ms(LeaseTTL), S3Latency: o.S3Latency,
			Coordination: o.coordination()},
		Scenarios: map[string]Result{},
	}
	if o.Infra != nil {
		rep.Settings.Etcd, rep.Settings.S3 = "external "+o.Infra.EtcdEndpoint, "external "+o.Infra.S3Endpoint
	} else {
		rep.Settings.Etcd = "embedded etcd server, one member, 10ms ticks, no fsync"
		rep.Settings.S3 = "embedded VersityGW, POSIX backend on the data directory"
	}
	if o.onS3() {
		rep.Settings.Etcd = "none (coordination on S3)"
	}
	start := time.Now()
	for _, name := range names {
		t0 := time.Now()
		e.logf("%s: starting", name)
		res, err := e.scenarioFunc(name)(ctx, e)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "bench: ") {
				err = fmt.Errorf("bench: %s: %w", name, err)
			}
			rep.DurationS = round(time.Since(start).Seconds(), 1)
			rep.Machine.LoadAvg1mEnd = loadAvg()
			return rep, err
		}
		rep.Scenarios[name] = res
		e.logf("%s: done in %s", name, time.Since(t0).Round(100*time.Millisecond))
	}
	rep.DurationS = round(time.Since(start).Seconds(), 1)
	rep.Machine.LoadAvg1mEnd = loadAvg()
	return rep, nil
}

// machine describes this machine.
func machine() Machine {
	return Machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), CPUModel: cpuModel(), LoadAvg1m: loadAvg(),
		Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
}

// loadAvg reads the 1-minute load average where /proc/loadavg has it.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return 0
	}
	return v
}

// cpuModel reads the CPU model name where /proc/cpuinfo has one.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as a readable table.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "tenure bench %s: %d CPUs", r.Version, m.CPUs)
	if m.CPUModel != "" {
		fmt.Fprintf(&b, " (%s)", m.CPUModel)
	}
	fmt.Fprintf(&b, ", %s %s/%s, load %.2f→%.2f, started %s, %.0fs\n", m.Go, m.OS, m.Arch, m.LoadAvg1m, m.LoadAvg1mEnd, r.Started.Format(time.RFC3339), r.DurationS)
	coord := r.Settings.Coordination
	if coord == "" { // a report written before the field
		coord = CoordinationEtcd
	}
	fmt.Fprintf(&b, "coordination %s, lease TTL %gms, %d trials", coord, r.Settings.LeaseTTLMS, r.Settings.Trials)
	if r.Settings.Quick {
		b.WriteString(", quick")
	}
	if l := r.Settings.S3Latency; l != nil {
		fmt.Fprintf(&b, ", S3 round trip %s", l)
	}
	b.WriteString("\n")
	for _, name := range Names() {
		res, ok := r.Scenarios[name]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "\n%s\n", name)
		rows := res.rows()
		width := 0
		for _, rw := range rows {
			width = max(width, len([]rune(rw.name)))
		}
		for _, rw := range rows {
			fmt.Fprintf(&b, "  %-*s  %s\n", width, rw.name, rw.value)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *HandoverResult) rows() []row {
	return []row{
		{"signal", fmt.Sprintf("%s to 1 of %d runner processes, %d shards", r.Signal, r.Runners, r.Shards)},
		{"all its shards re-owned", fmt.Sprintf("median %.1fms (%.2f×TTL), max %.1fms (%.2f×TTL)", r.MedianMS, r.MedianXTTL, r.MaxMS, r.MaxXTTL)},
		{"per shard, lock gone → re-locked", fmt.Sprintf("median %.2fms, p99 %.2fms, max %.2fms", r.ShardGapMedianMS, r.ShardGapP99MS, r.ShardGapMaxMS)},
		{"trials (ms)", joinFloats(r.Trials, func(t HandoverTrial) float64 { return t.MS })},
	}
}

func (r *DetachResult) rows() []row {
	return []row{
		{"lease expiry − handler cancelled", fmt.Sprintf("min %.1fms, median %.1fms (TTL %gms, detach margin %gms)", r.MinMarginMS, r.MedianMarginMS, r.LeaseTTLMS, r.DetachMarginMS)},
		{"trials (ms)", joinFloats(r.Trials, func(t DetachTrial) float64 { return t.MarginMS })},
		{"partition → handler cancelled (ms)", joinFloats(r.Trials, func(t DetachTrial) float64 { return t.AfterPartitionMS })},
	}
}

func (r *ThroughputResult) rows() []row {
	rows := []row{
		{"1 runner", fmt.Sprintf("%.0f tasks/s", r.OneRunner)},
		{"3 runners", fmt.Sprintf("%.0f tasks/s", r.ThreeRunners)},
		{"batches", fmt.Sprintf("%d no-op tasks from %d goroutines, %d shards", r.TasksPerTrial, r.Submitters, r.Shards)},
		{"per task on the wire", describeOps(r.PerTask)},
	}
	if c := r.Ceiling; c != nil {
		rows = append(rows,
			row{"S3 ceiling, same mix", fmt.Sprintf("%.0f task-equivalents/s (%.0f requests/s) from %d workers: %s", c.TasksPerS, c.OpsPerS, c.Workers, strings.Join(c.Sequence, " "))})
	}
	if c := r.Ceiling3; c != nil {
		rows = append(rows,
			row{"S3 ceiling, beside 3 runners", fmt.Sprintf("%.0f task-equivalents/s from %d workers", c.TasksPerS, c.Workers)})
	}
	if r.Ceiling != nil {
		rows = append(rows, row{"ratio to the ceiling", fmt.Sprintf("%.2f with 1 runner, %.2f with 3", r.Ratio, r.Ratio3)})
	}
	return rows
}

func (r *LatencyResult) rows() []row {
	return []row{
		{"submit → handler start", fmt.Sprintf("p50 %.2fms, p99 %.2fms, max %.2fms, mean %.2fms", r.P50MS, r.P99MS, r.MaxMS, r.MeanMS)},
		{"tasks", fmt.Sprintf("%d, one at a time, after %d warm-up", r.Tasks, r.Warmup)},
	}
}

func (r *S3CostResult) rows() []row {
	idle := fmt.Sprintf("%.1f/min for %d runners, %d shards (%.2f/min/runner; window %gs", r.Idle.PerMinute, r.Runners, r.Shards, r.Idle.PerMinutePerRunner, r.Idle.WindowS)
	if r.Idle.Scaled {
		idle += ", scaled to a minute"
	}
	idle += "): " + describeOps(intsToFloats(r.Idle.Requests))
	c := r.PerTaskClasses
	l := r.UnderLoad
	rows := []row{
		{"per task", describeOps(r.PerTask)},
		{"per task by class", fmt.Sprintf("%g PUT-class, %g GET-class, %g DELETE", c.PutClass, c.GetClass, c.Delete)},
		{"under load", fmt.Sprintf("%.1f/min/runner (%g PUT-class, %g GET-class) at %.1f tasks/s over %gs: %s",
			l.PerMinutePerRunner, l.PerMinutePerRunnerClasses.PutClass, l.PerMinutePerRunnerClasses.GetClass, l.TasksPerS, l.WindowS, describeOps(intsToFloats(l.Requests)))},
		{"idle", idle},
	}
	if e := r.Idle.Etcd; e != nil {
		rows = append(rows, row{"idle etcd", fmt.Sprintf("%.2f requests/min/runner at the default lease TTL %gs (etcd's own count): %s",
			e.PerMinutePerRunner, e.LeaseTTLS, describeOps(e.Requests))})
	} else {
		rows = append(rows, row{"idle etcd", "none: coordination on S3 (its requests are in idle above)"})
	}
	ic := r.IdleCluster
	return append(rows,
		row{"idle cluster, monthly", fmt.Sprintf("$%.2f measured for %d runners, %d shards over %d days (%s)", ic.USD, ic.Runners, ic.Shards, ic.Days, ic.Formula)},
		row{"idle cluster, model", fmt.Sprintf("$%.2f: the task store's steady state, coordination left out (%s)", ic.ModelUSD, ic.ModelFormula)},
		row{"monthly cost", fmt.Sprintf("$%.2f (tasks $%.2f + idle $%.2f) for %d tasks/day on %d runners", r.Cost.TotalUSD, r.Cost.TaskRequestsUSD, r.Cost.IdleRequestsUSD, r.Cost.TasksPerDay, r.Cost.Runners)},
		row{"formula", r.Cost.Formula})
}

func (r *AssignResult) rows() []row {
	var out []row
	for _, c := range r.Cases {
		out = append(out, row{fmt.Sprintf("%d shards × %d runners", c.Shards, c.Runners),
			fmt.Sprintf("Assign %.3fms, Reassign %.3fms", c.AssignMS, c.ReassignMS)})
	}
	return out
}

func joinFloats[T any](ts []T, f func(T) float64) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = fmt.Sprintf("%.1f", f(t))
	}
	return strings.Join(parts, " ")
}

func intsToFloats(m map[string]int) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = float64(v)
	}
	return out
}
