package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/runner"
)

// Scenario names, in the order "all" runs them.
const (
	ScenarioFailover   = "failover"
	ScenarioHandoff    = "handoff"
	ScenarioDetach     = "detach"
	ScenarioThroughput = "throughput"
	ScenarioLatency    = "latency"
	ScenarioS3Cost     = "s3cost"
	ScenarioAssign     = "assign"
	ScenarioCall       = "call"
	ScenarioState      = "state"
	// ScenarioLatencyProfile is the task path under a simulated S3 round
	// trip.
	ScenarioLatencyProfile = "latency-profile"
	// ScenarioRenewal is the cost of renewing a long task's claim.
	ScenarioRenewal = "renewal"
	// ScenarioScale is cold start, handoff, failover and idle request
	// rates of N runner processes over many shards.
	ScenarioScale = "scale"
	// All selects every scenario.
	All = "all"
)

// Names returns every scenario name in the order a run takes them.
func Names() []string {
	return []string{ScenarioFailover, ScenarioHandoff, ScenarioDetach, ScenarioThroughput,
		ScenarioLatency, ScenarioLatencyProfile, ScenarioS3Cost, ScenarioRenewal, ScenarioAssign, ScenarioCall, ScenarioState, ScenarioScale}
}

// Defaults of a run.
const (
	// DefaultTrials is the number of trials per scenario.
	DefaultTrials = 5
	// QuickTrials is the number of trials per scenario with Quick.
	QuickTrials = 1
	// MaxTrials bounds Trials, so that a typo cannot run for hours.
	MaxTrials = 100
	// MaxScaleRunners bounds each ScaleRunners count, so that a typo
	// cannot start thousands of processes.
	MaxScaleRunners = 500
	// MaxScaleShards bounds ScaleShards.
	MaxScaleShards = 65536
	// LeaseTTL is the runners' lease TTL: short, so that failover and
	// detachment trials finish in seconds.
	LeaseTTL = 3 * time.Second
)

var (
	// ErrUnknownScenario is wrapped by the error for a scenario name that
	// is not one of Names (or All).
	ErrUnknownScenario = errors.New("bench: unknown scenario")
	// ErrInvalidOptions is wrapped by every other Options error.
	ErrInvalidOptions = errors.New("bench: invalid options")
)

// Options configures a run.
type Options struct {
	// Scenarios are the scenario names to run, or All; duplicates run once,
	// in the order of Names. Required.
	Scenarios []string
	// Trials is the number of trials of each scenario (failover and
	// handoff kills, detachments, throughput batches, s3cost batches, assign
	// runs, call handoffs and crashes); 0 means DefaultTrials, or QuickTrials with Quick.
	Trials int
	// Quick shrinks every scenario (fewer tasks, a 5s idle window, smaller
	// assignment sizes, shorter call windows and fewer callers) for a smoke
	// run of a few seconds per scenario.
	Quick bool
	// DataDir holds the servers' data, the runners' config and logs; it is
	// kept. Empty: a temporary directory, removed after a successful run and
	// kept (and named in the error) after a failed one.
	DataDir string
	// Executable is the tenure binary the child-process scenarios start
	// (`<Executable> run --config …`). Empty: os.Executable(), the running
	// tenure binary.
	Executable string
	// Infra, when set, is used instead of starting embedded servers.
	Infra *Infra
	// Progress receives one line per step and trial (stderr for the CLI);
	// nil discards them.
	Progress io.Writer
	// Version is recorded in the report.
	Version string
	// S3Latency, when set, puts a simulated round trip on every S3
	// request of the runners and submitters of every scenario, and is the
	// one profile latency-profile measures (instead of its defaults).
	S3Latency *S3Latency
	// ScaleRunners are the runner-process counts scale measures, one row
	// each; empty: DefaultScaleRunners (QuickScaleRunners with Quick).
	ScaleRunners []int
	// ScaleShards is scale's shard count; 0: DefaultScaleShards
	// (QuickScaleShards with Quick).
	ScaleShards int
	// Coordination is the runners' coordination backend: CoordinationEtcd
	// (the default when empty) or CoordinationS3. On S3 no etcd is
	// started or needed, and the scenarios that exist only on etcd
	// (detach, which partitions etcd) are reported as skipped.
	Coordination string
}

// Coordination backends (Options.Coordination), as the runner config
// names them.
const (
	// CoordinationEtcd: runners register, lock shards and wake each other
	// through etcd.
	CoordinationEtcd = runner.CoordinationEtcd
	// CoordinationS3: the same through conditional writes in the S3
	// bucket, polled.
	CoordinationS3 = runner.CoordinationS3
)

// coordination returns the backend in force.
func (o Options) coordination() string {
	if o.Coordination == "" {
		return CoordinationEtcd
	}
	return o.Coordination
}

// onS3 reports whether the runners coordinate on S3.
func (o Options) onS3() bool { return o.coordination() == CoordinationS3 }

// Infra is an etcd and an S3 server to run against instead of embedded
// ones (tests use it to share their servers). EtcdEndpoint may be empty
// when the runners coordinate on S3.
type Infra struct {
	EtcdEndpoint string // client URL, e.g. http://127.0.0.1:2379
	S3Endpoint   string // e.g. http://127.0.0.1:7070 (path-style addressing)
	S3Region     string // default us-east-1
	AccessKey    string
	SecretKey    string
	// Bucket is created when missing. Default "tenure-bench".
	Bucket string
}

// scenarios returns the selected scenario names in run order, or an error
// naming the first unknown one.
func (o Options) scenarios() ([]string, error) {
	if len(o.Scenarios) == 0 {
		return nil, fmt.Errorf("%w: no scenario given (one or more of %s, or %s)", ErrInvalidOptions, strings.Join(Names(), ", "), All)
	}
	want := map[string]bool{}
	for _, s := range o.Scenarios {
		switch {
		case s == All:
			for _, n := range Names() {
				want[n] = true
			}
		case slices.Contains(Names(), s):
			want[s] = true
		default:
			return nil, fmt.Errorf("%w %q (known: %s, or %s)", ErrUnknownScenario, s, strings.Join(Names(), ", "), All)
		}
	}
	var out []string
	for _, n := range Names() {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// Validate checks the options, naming the field at fault.
func (o Options) Validate() error {
	if _, err := o.scenarios(); err != nil {
		return err
	}
	if o.Trials < 0 || o.Trials > MaxTrials {
		return fmt.Errorf("%w: Trials = %d: must be in [1, %d] (0: the default)", ErrInvalidOptions, o.Trials, MaxTrials)
	}
	for _, n := range o.ScaleRunners {
		if n < 2 || n > MaxScaleRunners { // one runner has nobody to hand off to
			return fmt.Errorf("%w: ScaleRunners has %d: each must be in [2, %d]", ErrInvalidOptions, n, MaxScaleRunners)
		}
	}
	if o.ScaleShards < 0 || o.ScaleShards > MaxScaleShards {
		return fmt.Errorf("%w: ScaleShards = %d: must be in [1, %d] (0: the default)", ErrInvalidOptions, o.ScaleShards, MaxScaleShards)
	}
	switch o.Coordination {
	case "", CoordinationEtcd, CoordinationS3:
	default:
		return fmt.Errorf("%w: Coordination = %q: must be %s or %s", ErrInvalidOptions, o.Coordination, CoordinationEtcd, CoordinationS3)
	}
	if l := o.S3Latency; l != nil {
		if err := l.validate(); err != nil {
			return fmt.Errorf("%w: S3Latency %s: %v", ErrInvalidOptions, l, err)
		}
	}
	if i := o.Infra; i != nil {
		switch {
		case i.EtcdEndpoint == "" && !o.onS3():
			return fmt.Errorf("%w: Infra.EtcdEndpoint is required (coordination on etcd)", ErrInvalidOptions)
		case i.S3Endpoint == "":
			return fmt.Errorf("%w: Infra.S3Endpoint is required", ErrInvalidOptions)
		case (i.AccessKey == "") != (i.SecretKey == ""):
			return fmt.Errorf("%w: Infra.AccessKey and Infra.SecretKey go together", ErrInvalidOptions)
		}
	}
	return nil
}

// trials returns the number of trials in force.
func (o Options) trials() int {
	switch {
	case o.Trials > 0:
		return o.Trials
	case o.Quick:
		return QuickTrials
	}
	return DefaultTrials
}

// pick returns quick when the run is quick, else full.
func pick[T any](o Options, full, quick T) T {
	if o.Quick {
		return quick
	}
	return full
}
