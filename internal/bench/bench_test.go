package bench

import (
	"context"
	"errors"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/storage"
)

func TestScenarioSelection(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{[]string{"all"}, Names()},
		{[]string{"assign", "failover", "assign"}, []string{"failover", "assign"}},
		{[]string{"s3cost", "all"}, Names()},
	} {
		got, err := Options{Scenarios: tc.in}.scenarios()
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("scenarios(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := (Options{Scenarios: []string{"failover", "nope"}}).scenarios(); !errors.Is(err, ErrUnknownScenario) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown scenario: %v, want ErrUnknownScenario naming it", err)
	}
	if _, err := (Options{}).scenarios(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("no scenario: %v, want ErrInvalidOptions", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := Options{Scenarios: []string{"assign"}}
	for name, tc := range map[string]struct {
		mut   func(*Options)
		field string // "" when valid
	}{
		"defaults":             {func(*Options) {}, ""},
		"negative trials":      {func(o *Options) { o.Trials = -1 }, "Trials"},
		"too many trials":      {func(o *Options) { o.Trials = MaxTrials + 1 }, "Trials"},
		"infra without etcd":   {func(o *Options) { o.Infra = &Infra{S3Endpoint: "http://x:1"} }, "Infra.EtcdEndpoint"},
		"infra without s3":     {func(o *Options) { o.Infra = &Infra{EtcdEndpoint: "http://x:1"} }, "Infra.S3Endpoint"},
		"unknown coordination": {func(o *Options) { o.Coordination = "zookeeper" }, "Coordination"},
		"s3 infra without etcd": {func(o *Options) {
			o.Coordination, o.Infra = CoordinationS3, &Infra{S3Endpoint: "http://x:2"}
		}, ""},
		"half credentials": {func(o *Options) {
			o.Infra = &Infra{EtcdEndpoint: "http://x:1", S3Endpoint: "http://x:2", AccessKey: "a"}
		}, "Infra.AccessKey"},
	} {
		o := ok
		tc.mut(&o)
		err := o.Validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.field != "" && (!errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field)):
			t.Errorf("%s: %v, want ErrInvalidOptions naming %s", name, err, tc.field)
		}
	}
}

func TestTrialsAndPick(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want int
	}{
		{Options{}, DefaultTrials},
		{Options{Quick: true}, QuickTrials},
		{Options{Quick: true, Trials: 7}, 7},
		{Options{Trials: 2}, 2},
	} {
		if got := tc.o.trials(); got != tc.want {
			t.Errorf("trials of %+v = %d, want %d", tc.o, got, tc.want)
		}
	}
	if pick(Options{}, 1, 2) != 1 || pick(Options{Quick: true}, 1, 2) != 2 {
		t.Error("pick does not follow Quick")
	}
}

func TestStats(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	if got := median(xs); got != 3 {
		t.Errorf("median = %g, want 3", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("even median = %g, want 2.5", got)
	}
	if !slices.Equal(xs, []float64{5, 1, 4, 2, 3}) {
		t.Errorf("median sorted its argument: %v", xs)
	}
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100 … 1
	}
	for q, want := range map[float64]float64{0: 1, 0.5: 50, 0.99: 99, 1: 100} {
		if got := quantile(hundred, q); got != want {
			t.Errorf("quantile(1…100, %g) = %g, want %g", q, got, want)
		}
	}
	if quantile(nil, 0.5) != 0 || median(nil) != 0 || maxOf(nil) != 0 || mean(nil) != 0 {
		t.Error("empty input must give 0")
	}
	if got := mean([]float64{1, 2, 6}); got != 3 {
		t.Errorf("mean = %g, want 3", got)
	}
	if got := ms(1500 * time.Microsecond); got != 1.5 {
		t.Errorf("ms(1.5ms) = %g", got)
	}
}

func TestPriceClasses(t *testing.T) {
	c := classesOf(map[string]float64{"create": 1, "put": 1, "replace": 2, "get": 1, "delete": 1, "list": 0.5, "list_v1": 0.5, "head_bucket": 0.25, "head": 0.25})
	want := Classes{PutClass: 5, GetClass: 1.5, Delete: 1}
	if c != want {
		t.Fatalf("classes = %+v, want %+v", c, want)
	}
}

// TestEstimate: the happy path (4 PUT-class, 1 GET per task) and 16
// listings a minute over 3 runners, priced for 100k tasks a day on 50
// runners for 30 days.
func TestEstimate(t *testing.T) {
	perTask := Classes{PutClass: 4, GetClass: 1, Delete: 1}
	idle := Classes{PutClass: 16.0 / 3}
	est := estimate(perTask, idle)
	wantTasks := 100_000 * 30 * (4*0.005 + 1*0.0004) / 1000 // $61.20
	wantIdle := 50 * 1440 * 30 * (16.0 / 3 * 0.005) / 1000  // $57.60
	if math.Abs(est.TaskRequestsUSD-wantTasks) > 0.005 || math.Abs(est.IdleRequestsUSD-wantIdle) > 0.005 {
		t.Fatalf("estimate: tasks $%g idle $%g, want $%.2f and $%.2f", est.TaskRequestsUSD, est.IdleRequestsUSD, wantTasks, wantIdle)
	}
	if math.Abs(est.TotalUSD-(wantTasks+wantIdle)) > 0.01 {
		t.Fatalf("total $%g, want $%.2f", est.TotalUSD, wantTasks+wantIdle)
	}
	for _, s := range []string{"100000 × 30", "50 × 1440 × 30", "0.005", "0.0004"} {
		if !strings.Contains(est.Formula, s) {
			t.Errorf("formula %q does not show %q", est.Formula, s)
		}
	}
}

func TestPerTask(t *testing.T) {
	got := perTask(map[string]float64{"get": 10, "list": 3}, map[string]float64{"get": 30, "list": 3, "replace": 40}, 20)
	want := map[string]float64{"get": 1, "replace": 2}
	if len(got) != len(want) || got["get"] != 1 || got["replace"] != 2 {
		t.Fatalf("perTask = %v, want %v (zeros left out)", got, want)
	}
}

func shard(i int) storage.ShardID { return storage.ShardID{Group: storage.DefaultGroup, Index: i} }

func put(s storage.ShardID, runner string) storage.LockEvent {
	return storage.LockEvent{Kind: storage.EventPut, Shard: s, Lock: storage.ShardLock{Shard: s, RunnerID: runner}}
}

func del(s storage.ShardID) storage.LockEvent {
	return storage.LockEvent{Kind: storage.EventDelete, Shard: s}
}

// TestShardGaps: per shard, from the victim's lock deletion to the next
// lock by another runner; shards of others and the victim's re-locks are
// ignored.
func TestShardGaps(t *testing.T) {
	tr := harness.NewLockTimeline()
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tr.Record(t0, put(shard(0), "v"))
	tr.Record(t0, put(shard(1), "v"))
	tr.Record(t0, put(shard(2), "w"))
	tr.Record(ms(10), del(shard(0)))
	tr.Record(ms(12), put(shard(0), "w"))
	tr.Record(ms(20), del(shard(2))) // not the victim's
	tr.Record(ms(25), put(shard(2), "x"))
	tr.Record(ms(30), del(shard(1)))
	tr.Record(ms(35), put(shard(1), "v")) // the victim again: not a handover
	tr.Record(ms(40), del(shard(1)))
	tr.Record(ms(47), put(shard(1), "x"))
	got := shardGaps(tr.Since(t0.Add(time.Millisecond)), "v", []storage.ShardID{shard(0), shard(1)})
	slices.Sort(got)
	if !slices.Equal(got, []float64{2, 7}) {
		t.Fatalf("gaps = %v, want [2 7]", got)
	}
}

func TestReportTable(t *testing.T) {
	rep := &Report{
		Machine:  Machine{CPUs: 2, Go: "go1.26", OS: "linux", Arch: "amd64"},
		Settings: Settings{Trials: 1, LeaseTTLMS: 3000},
		Scenarios: map[string]Result{
			ScenarioAssign:  &AssignResult{Cases: []AssignCase{{Shards: 256, Runners: 3, AssignMS: 0.1, ReassignMS: 0.2}}},
			ScenarioLatency: &LatencyResult{Tasks: 2, P50MS: 1.5, P99MS: 2.5},
		},
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{"latency", "p50 1.50ms, p99 2.50ms", "256 shards × 3 runners", "Assign 0.100ms"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	if strings.Index(out, "latency") > strings.Index(out, "assign") {
		t.Errorf("scenarios not in run order:\n%s", out)
	}
}

// pkgDir is this package's directory, read before any test starts the
// shared S3 gateway (which changes the working directory).
var pkgDir, _ = os.Getwd()

// sharedInfra is the tests' shared etcd and S3 servers, with a bucket of
// the test's own; on coordination s3 (an optional argument) without etcd.
func sharedInfra(t *testing.T, coordination ...string) *Infra {
	s3 := testenv.SharedS3(t)
	ak, sk := s3.Credentials()
	in := &Infra{S3Endpoint: s3.Endpoint(), S3Region: s3.Region(), AccessKey: ak, SecretKey: sk, Bucket: s3.Bucket(t)}
	if !slices.Contains(coordination, CoordinationS3) {
		in.EtcdEndpoint = testenv.SharedEtcd(t).Endpoint()
	}
	return in
}

// TestCallScenario runs call quickly against the shared servers, with
// runner processes of a freshly built tenure: every figure must be there,
// and the happy paths and the planned handoff must show no error. Timings
// are reported, not asserted.
func TestCallScenario(t *testing.T) {
	infra := sharedInfra(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := buildTenure(ctx, t)
	var progress strings.Builder
	rep, err := Run(ctx, Options{Scenarios: []string{ScenarioCall}, Quick: true, Infra: infra, Executable: bin,
		DataDir: filepath.Join(t.TempDir(), "data"), Progress: &progress})
	if err != nil {
		t.Fatalf("bench call: %v\n%s", err, progress.String())
	}
	r, ok := rep.Scenarios[ScenarioCall].(*CallResult)
	if !ok {
		t.Fatalf("call result: %#v", rep.Scenarios[ScenarioCall])
	}
	var got []string
	for _, p := range r.Paths {
		got = append(got, p.Path+"/"+strings.Repeat("x", p.Callers))
		if p.Errors != 0 || p.Calls < 10 || p.CallsPerS <= 0 || p.Entities < 1 || !(0 < p.P50US && p.P50US <= p.P99US && p.P99US <= p.MaxUS) {
			t.Errorf("%s, %d callers: %+v, want calls, no error, p50 ≤ p99 ≤ max", p.Path, p.Callers, p)
		}
		t.Logf("%s, %d callers: %.0f calls/s, p50 %.0fµs, p99 %.0fµs", p.Path, p.Callers, p.CallsPerS, p.P50US, p.P99US)
	}
	want := []string{"remote/x", "remote/" + strings.Repeat("x", 16), "local/x", "local/" + strings.Repeat("x", 16)}
	if !slices.Equal(got, want) {
		t.Errorf("paths %q, want remote and local with 1 and 16 callers", got)
	}
	for name, f := range map[string]*CallFault{"handoff": r.Handoff, "crash": r.Crash} {
		if f == nil || len(f.Trials) != 1 {
			t.Fatalf("%s: %+v, want one trial", name, f)
		}
		tr := f.Trials[0]
		if tr.Entities < 1 || tr.Shards < 1 || tr.Calls < 1 || tr.ReownedMS <= 0 || len(f.Errors) != 3 {
			t.Errorf("%s: %+v", name, tr)
		}
		t.Logf("%s: %+v", name, tr)
	}
	if r.Handoff.ErrorsTotal != 0 {
		t.Errorf("handoff: %d errors %v (%v), want none", r.Handoff.ErrorsTotal, r.Handoff.Errors, r.Handoff.FirstErrors)
	}
	if c := r.Crash; c.UnavailableMaxMS <= 0 || c.UnavailableMedianMS > c.UnavailableMaxMS || c.TargetMS != r.LeaseTTLMS+500 {
		t.Errorf("crash unavailability: %+v", c)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "remote, 16 callers") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
}

// TestStateScenario runs state quickly against the shared servers: the S3
// requests per call are the protocol's (cold: GET 404 + fencing create;
// warm: GET; after a handoff: GET + fencing replace; save: one replace),
// and every latency is there. Timings are reported, not asserted.
func TestStateScenario(t *testing.T) {
	infra := sharedInfra(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	rep, err := Run(ctx, Options{Scenarios: []string{ScenarioState}, Quick: true, Infra: infra,
		DataDir: filepath.Join(t.TempDir(), "data"), Progress: &progress})
	if err != nil {
		t.Fatalf("bench state: %v\n%s", err, progress.String())
	}
	r, ok := rep.Scenarios[ScenarioState].(*StateResult)
	if !ok || len(r.Trials) != 1 {
		t.Fatalf("state result: %#v", rep.Scenarios[ScenarioState])
	}
	for name, tc := range map[string]struct {
		p    StatePhase
		want map[string]float64
	}{
		"cold":    {r.Cold, map[string]float64{"get": 1, "create": 1}},
		"warm":    {r.Warm, map[string]float64{"get": 1}},
		"handoff": {r.Handoff, map[string]float64{"get": 1, "replace": 1}},
		"save":    {r.Save, map[string]float64{"replace": 1}},
	} {
		if !maps.Equal(tc.p.PerCall, tc.want) || tc.p.Calls < 1 || !(0 < tc.p.P50MS && tc.p.P50MS <= tc.p.P99MS && tc.p.P99MS <= tc.p.MaxMS) {
			t.Errorf("%s: %+v, want S3 per call %v, p50 ≤ p99 ≤ max", name, tc.p, tc.want)
		}
		t.Logf("%s: p50 %.2fms p99 %.2fms, S3 per call %v", name, tc.p.P50MS, tc.p.P99MS, tc.p.PerCall)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "activation after a handoff") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
}

// TestScaleScenario runs scale quickly (3 runner processes of a freshly
// built tenure, 256 shards) against the shared servers: the row must have
// a cold start, a handoff and a crash that moved shards, and idle rates
// that are counted and not negative. Timings are reported, not asserted.
func TestScaleScenario(t *testing.T) { testScale(t, CoordinationEtcd) }

// TestScaleScenarioOnS3 is TestScaleScenario with coordination on S3, no
// etcd, over 64 shards: the idle runners' S3 requests include their polls.
// (256 shards on S3 overwhelm the shared gateway of a race-instrumented
// test binary on a busy machine: the runners' lease renewals time out.)
func TestScaleScenarioOnS3(t *testing.T) { testScale(t, CoordinationS3) }

func testScale(t *testing.T, coord string) {
	shards := QuickScaleShards
	if coord == CoordinationS3 {
		shards = 64
	}
	infra := sharedInfra(t, coord)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildTenure(ctx, t)
	var progress strings.Builder
	data := filepath.Join(t.TempDir(), "data")
	rep, err := Run(ctx, Options{Scenarios: []string{ScenarioScale}, Quick: true, Infra: infra, Executable: bin, Coordination: coord,
		ScaleShards: shards, DataDir: data, Progress: &progress})
	if err != nil {
		logTails(t, filepath.Join(data, "logs"))
		t.Fatalf("bench scale: %v\n%s", err, progress.String())
	}
	r, ok := rep.Scenarios[ScenarioScale].(*ScaleResult)
	if !ok || len(r.Rows) != len(QuickScaleRunners) || r.Shards != shards {
		t.Fatalf("scale result: %#v", rep.Scenarios[ScenarioScale])
	}
	for _, x := range r.Rows {
		t.Logf("%d runners: %+v", x.Runners, x)
		total := 0
		for _, n := range x.PerRunner {
			total += n
		}
		if x.ColdStartMS <= 0 || x.ColdStartLockChanges < x.Shards || total != x.Shards || len(x.PerRunner) != x.Runners {
			t.Errorf("%d runners: cold start %gms, %d lock changes, shards by runner %v", x.Runners, x.ColdStartMS, x.ColdStartLockChanges, x.PerRunner)
		}
		for _, f := range []ScaleFault{x.Handoff, x.Crash} {
			if f.ReownedMS <= 0 || f.Shards < 1 || f.Victim == "" {
				t.Errorf("%d runners, %s: %+v", x.Runners, f.Signal, f)
			}
		}
		if x.Handoff.ExitCode != 0 || x.Crash.ExitCode != -1 || x.Handoff.RebalancedMS < x.Handoff.ReownedMS {
			t.Errorf("%d runners: handoff %+v, crash %+v: want exit codes 0 and -1, rebalanced after re-owned", x.Runners, x.Handoff, x.Crash)
		}
		i := x.Idle
		if i.S3PerS < 0 || i.S3PerSPerRunner < 0 || i.WindowS <= 0 || i.ReconcileListsPerS <= 0 {
			t.Errorf("%d runners, idle: %+v (etcd %s)", x.Runners, i, describeEtcdRate(i))
		}
		switch coord {
		case CoordinationS3:
			// No etcd; the runners poll S3 all the time.
			if !i.NoEtcd || i.EtcdPerS != nil || i.S3PerS <= 0 {
				t.Errorf("%d runners on S3, idle: %+v", x.Runners, i)
			}
		default:
			// The shared etcd is embedded in the test binary: its
			// counters are readable, and idle runners keep their leases
			// alive.
			if i.NoEtcd || i.EtcdPerS == nil || *i.EtcdPerS <= 0 || *i.EtcdPerSPerRunner <= 0 {
				t.Errorf("%d runners, idle: %+v (etcd %s)", x.Runners, i, describeEtcdRate(i))
			}
		}
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "3 runners: cold start → balanced") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
	t.Logf("table:\n%s", table.String())
}

// buildTenure builds ./cmd/tenure into the test's temporary directory:
// the runner processes of the scenarios that start them.
func buildTenure(ctx context.Context, t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tenure")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/tenure")
	build.Dir = filepath.Join(pkgDir, "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestHandoverAndCostByBackend runs failover, handoff and s3cost quickly
// on each coordination backend against the shared servers (on S3 without
// etcd, and detach, which needs etcd, reported as skipped): every figure
// must be there, the report must name the backend, and on S3 the idle
// runners' requests must include their coordination polls. Timings are
// reported, not asserted.
func TestHandoverAndCostByBackend(t *testing.T) {
	for _, coord := range []string{CoordinationEtcd, CoordinationS3} {
		t.Run(coord, func(t *testing.T) {
			infra := sharedInfra(t, coord)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			bin := buildTenure(ctx, t)
			scenarios := []string{ScenarioFailover, ScenarioHandoff, ScenarioS3Cost}
			if coord == CoordinationS3 {
				scenarios = append(scenarios, ScenarioDetach)
			}
			var progress strings.Builder
			data := filepath.Join(t.TempDir(), "data")
			rep, err := Run(ctx, Options{Scenarios: scenarios, Quick: true, Infra: infra, Executable: bin, Coordination: coord,
				DataDir: data, Progress: &progress})
			if err != nil {
				logTails(t, filepath.Join(data, "logs"))
				t.Fatalf("bench on %s: %v\n%s", coord, err, progress.String())
			}
			t.Logf("progress:\n%s", progress.String())
			if rep.Settings.Coordination != coord {
				t.Errorf("settings name coordination %q, want %q", rep.Settings.Coordination, coord)
			}
			for name, exit := range map[string]int{ScenarioFailover: -1, ScenarioHandoff: 0} {
				r, ok := rep.Scenarios[name].(*HandoverResult)
				if !ok || len(r.Trials) != 1 {
					t.Fatalf("%s result: %#v", name, rep.Scenarios[name])
				}
				if tr := r.Trials[0]; tr.MS <= 0 || tr.Shards < 1 || tr.ExitCode != exit {
					t.Errorf("%s: %+v, want shards re-owned after some time, exit code %d", name, tr, exit)
				}
			}
			r, ok := rep.Scenarios[ScenarioS3Cost].(*S3CostResult)
			if !ok {
				t.Fatalf("s3cost result: %#v", rep.Scenarios[ScenarioS3Cost])
			}
			if r.PerTaskClasses.PutClass <= 0 || r.Shards != 64 || r.Runners != 3 {
				t.Errorf("s3cost: per task %+v on %d runners, %d shards", r.PerTask, r.Runners, r.Shards)
			}
			if l := r.UnderLoad; l.Tasks < 1 || l.WindowS <= 0 || l.TasksPerS <= 0 || l.PerMinutePerRunner <= 0 {
				t.Errorf("s3cost under load: %+v", l)
			}
			// The quick idle window (5s) is shorter than an idle etcd
			// runner's reconcile interval: it may see no S3 request at
			// all, whereas S3 runners poll all the time.
			if ic := r.IdleCluster; ic.Runners != 3 || ic.Shards != 64 || ic.USD < 0 || ic.ModelUSD <= 0 ||
				(coord == CoordinationS3 && (ic.USD <= 0 || ic.PerMinute.PutClass <= 0)) {
				t.Errorf("s3cost idle cluster: %+v", ic)
			}
			if (r.Idle.Etcd == nil) != (coord == CoordinationS3) {
				t.Errorf("s3cost idle etcd figures %+v on %s", r.Idle.Etcd, coord)
			}
			if coord == CoordinationS3 {
				// Idle S3 runners poll their coordination records: LISTs
				// at least every poll_max (2s) each, beside the shards'.
				window := r.Idle.WindowS
				if min := int(window/2) * r.Runners; r.Idle.Requests["list"] < min {
					t.Errorf("s3cost idle on S3: %d LISTs in %gs, want ≥ %d (the runners' polls): %v", r.Idle.Requests["list"], window, min, r.Idle.Requests)
				}
				s, ok := rep.Scenarios[ScenarioDetach].(*SkippedResult)
				if !ok || !s.Skipped || !strings.Contains(s.Reason, "etcd") {
					t.Errorf("detach on S3: %#v, want skipped, saying why", rep.Scenarios[ScenarioDetach])
				}
			}
			t.Logf("s3cost: per task %v; under load %+v; idle %+v; idle cluster %+v", r.PerTask, r.UnderLoad, r.Idle.Requests, r.IdleCluster)
			var table strings.Builder
			if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "coordination "+coord) ||
				!strings.Contains(table.String(), "under load") || !strings.Contains(table.String(), "idle cluster, monthly") {
				t.Errorf("table: %v\n%s", err, table.String())
			}
			t.Logf("table:\n%s", table.String())
		})
	}
}

// logTails logs the end of every log file under dir: the test's data
// directory is removed when it ends.
func logTails(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		t.Logf("%s: %s", filepath.Base(f), tail(f, 5))
	}
}

// TestIdleClusterCost: 71 LISTs a minute for 30 days, and the model's
// LISTs of 64 shards and clock reads of 3 runners.
func TestIdleClusterCost(t *testing.T) {
	m := IdleModel{ListsPerShardHour: 2, HeadBucketPerRunnerHour: 60}
	c := idleClusterCost(3, 64, Classes{PutClass: 71}, m)
	want := 1440 * 30 * 71 * 0.005 / 1000                    // $15.34
	wantModel := 24 * 30 * (64*2*0.005 + 3*60*0.0004) / 1000 // $0.51
	if math.Abs(c.USD-want) > 0.005 || math.Abs(c.ModelUSD-wantModel) > 0.005 || c.Runners != 3 || c.Shards != 64 || c.Days != 30 {
		t.Fatalf("idle cluster cost %+v, want $%.2f measured and $%.2f by the model", c, want, wantModel)
	}
	for _, s := range []string{"1440 × 30 × (71 × 0.005", "64 shards × 2 LIST/shard/h"} {
		if !strings.Contains(c.Formula+" "+c.ModelFormula, s) {
			t.Errorf("formulas %q and %q do not show %q", c.Formula, c.ModelFormula, s)
		}
	}
}

// TestLoadFigures: 90 requests of 3 runners over 10s while 30 tasks ran.
func TestLoadFigures(t *testing.T) {
	f := loadFigures(map[string]float64{"list": 60, "get": 30}, 30, 10*time.Second)
	if f.TasksPerS != 3 || f.PerMinutePerRunner != 180 || f.Requests["list"] != 60 || f.WindowS != 10 {
		t.Fatalf("load figures %+v, want 3 tasks/s, 180 requests/min/runner", f)
	}
	if c := f.PerMinutePerRunnerClasses; c.PutClass != 120 || c.GetClass != 60 {
		t.Errorf("by class %+v, want 120 PUT-class and 60 GET-class a minute", c)
	}
	if z := loadFigures(nil, 0, 0); z.PerMinutePerRunner != 0 || z.TasksPerS != 0 {
		t.Errorf("empty window: %+v", z)
	}
}

// TestReportNamesBackend: the table and the JSON name the coordination
// backend, and a skipped scenario says why in both.
func TestReportNamesBackend(t *testing.T) {
	rep := &Report{Settings: Settings{Trials: 1, LeaseTTLMS: 3000, Coordination: CoordinationS3},
		Scenarios: map[string]Result{ScenarioDetach: &SkippedResult{Skipped: true, Reason: "no etcd to partition"}}}
	var table, js strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"coordination s3,", "detach\n  skipped  no etcd to partition"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
	for _, s := range []string{`"coordination": "s3"`, `"skipped": true`, `"reason": "no etcd to partition"`} {
		if !strings.Contains(js.String(), s) {
			t.Errorf("JSON lacks %s:\n%s", s, js.String())
		}
	}
}
