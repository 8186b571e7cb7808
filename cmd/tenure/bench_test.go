//go:build !release

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/bench"
	"github.com/tenurehq/tenure/internal/testenv"
)

// benchOutput is what `tenure bench --json` prints.
type benchOutput struct {
	Machine struct {
		CPUs int    `json:"cpus"`
		Go   string `json:"go"`
		OS   string `json:"os"`
		Arch string `json:"arch"`
	} `json:"machine"`
	Started  time.Time `json:"started"`
	Settings struct {
		S3Latency *struct {
			RTTMS    float64 `json:"rtt_ms"`
			JitterMS float64 `json:"jitter_ms"`
		} `json:"s3_latency"`
	} `json:"settings"`
	Scenarios struct {
		Throughput     *bench.ThroughputResult     `json:"throughput"`
		LatencyProfile *bench.LatencyProfileResult `json:"latency-profile"`
		Renewal        *bench.RenewalResult        `json:"renewal"`
		Failover       *bench.HandoverResult       `json:"failover"`
		Handoff        *bench.HandoverResult       `json:"handoff"`
		Detach         *bench.DetachResult         `json:"detach"`
		Latency        *bench.LatencyResult        `json:"latency"`
		S3Cost         *bench.S3CostResult         `json:"s3cost"`
		Assign         *bench.AssignResult         `json:"assign"`
	} `json:"scenarios"`
}

// decodeBench decodes stdout, which must hold one JSON object and nothing
// else.
func decodeBench(t *testing.T, stdout string) benchOutput {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	var out benchOutput
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, stdout)
	}
	if rest, _ := io.ReadAll(dec.Buffered()); strings.TrimSpace(string(rest)) != "" {
		t.Fatalf("stdout has more than the JSON report: %q", rest)
	}
	if out.Machine.CPUs < 1 || out.Machine.Go == "" || out.Machine.OS == "" || out.Started.IsZero() {
		t.Fatalf("machine or start time missing: %+v", out)
	}
	return out
}

// sharedInfra points the bench at the test binary's shared servers: one
// embedded S3 gateway may run per process, and the other tests of the
// package start the shared one.
func sharedInfra(t *testing.T) *bench.Infra {
	s3 := testenv.SharedS3(t)
	ak, sk := s3.Credentials()
	return &bench.Infra{EtcdEndpoint: testenv.SharedEtcd(t).Endpoint(), S3Endpoint: s3.Endpoint(), S3Region: s3.Region(),
		AccessKey: ak, SecretKey: sk, Bucket: s3.Bucket(t)}
}

func runBenchCmd(ctx context.Context, t *testing.T, base bench.Options, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cli := &CLI{Stdout: &out, Stderr: &errOut, Version: "test", benchBase: base}
	_, err = execute(ctx, cli, append([]string{"bench"}, args...))
	return out.String(), errOut.String(), err
}

func TestBenchArgs(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	for _, tc := range []struct {
		args []string
		want string
		is   error
	}{
		{nil, "no scenario given", nil},
		{[]string{"--json"}, "no scenario given", nil},
		{[]string{"failover", "nope"}, `"nope"`, bench.ErrUnknownScenario},
		{[]string{"assign", "--trials", "-1"}, "--trials -1", nil},
		{[]string{"assign", "--trials", "1000"}, "--trials 1000", nil},
		{[]string{"assign", "--trials", "x"}, "invalid argument", nil},
		{[]string{"latency-profile", "--s3-latency", "20"}, "--s3-latency", bench.ErrInvalidOptions},
		{[]string{"latency-profile", "--s3-latency", "20ms,jit=1ms"}, "jitter=DURATION", bench.ErrInvalidOptions},
		{[]string{"latency-profile", "--s3-latency", "-5ms"}, "positive", bench.ErrInvalidOptions},
		{[]string{"latency-profile", "--s3-latency", "1h"}, "at most", bench.ErrInvalidOptions},
		{[]string{"scale", "--runners", "3,1"}, "--runners 1", nil},
		{[]string{"scale", "--runners", "3,x"}, "invalid argument", nil},
		{[]string{"scale", "--shards", "-1"}, "--shards -1", nil},
	} {
		_, _, err := runBenchCmd(ctx, t, bench.Options{}, tc.args...)
		switch {
		case err == nil:
			t.Errorf("bench %q: no error", tc.args)
		case exitCode(err) != 2:
			t.Errorf("bench %q: %v: exit status %d, want 2 (usage)", tc.args, err, exitCode(err))
		case tc.is != nil && !errors.Is(err, tc.is):
			t.Errorf("bench %q: %v, want %v", tc.args, err, tc.is)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("bench %q: %v, want it to mention %s", tc.args, err, tc.want)
		}
	}
	if stdout, _, err := runBenchCmd(ctx, t, bench.Options{}, "--help"); err != nil || !strings.Contains(stdout, "failover") {
		t.Errorf("bench --help: %v; does not list the scenarios on stdout:\n%s", err, stdout)
	}
}

// TestBenchInProcessScenarios runs the scenarios whose runners live in
// this process, quickly, and checks that every figure is there and that
// the happy path stays within its S3 cost target (BENCHMARKS.md). Everything the run
// started must be stopped when it returns (no goroutine of the module
// left).
func TestBenchInProcessScenarios(t *testing.T) {
	infra := sharedInfra(t)
	testenv.CheckLeaks(t)
	ctx := testCtx(t, 5*time.Minute)
	dir := filepath.Join(t.TempDir(), "data")
	stdout, stderr, err := runBenchCmd(ctx, t, bench.Options{Infra: infra},
		"detach", "latency", "s3cost", "assign", "--quick", "--json", "--data", dir)
	if err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr)
	}
	out := decodeBench(t, stdout)
	sc := out.Scenarios
	if sc.Failover != nil || sc.Handoff != nil {
		t.Errorf("scenarios that were not asked for ran: %+v", sc)
	}

	if d := sc.Detach; d == nil || len(d.Trials) != 1 {
		t.Errorf("detach: %+v, want one trial", d)
	} else {
		tr := d.Trials[0]
		if tr.Reason != "lease-deadline" && tr.Reason != "keepalive-failures" {
			t.Errorf("detach reason %q, want lease-deadline or keepalive-failures", tr.Reason)
		}
		// The handler was cancelled after the partition, within a TTL of
		// it, and before etcd expired the lease (the bench fails a trial
		// otherwise); the key went after the expiry.
		if tr.AfterPartitionMS <= 0 || tr.AfterPartitionMS > d.LeaseTTLMS {
			t.Errorf("handler cancelled %gms after the partition, want within (0, %g]", tr.AfterPartitionMS, d.LeaseTTLMS)
		}
		if tr.MarginMS <= 0 || tr.KeyDeletedMS < tr.MarginMS || abs(tr.ExpiryAfterPartitionMS-tr.AfterPartitionMS-tr.MarginMS) > 0.01 {
			t.Errorf("detach trial %+v: want a positive margin, the key deleted after the expiry, and expiry = cancellation + margin", tr)
		}
		if d.MinMarginMS != tr.MarginMS || d.MedianMarginMS != tr.MarginMS || d.DetachMarginMS != d.LeaseTTLMS/3 {
			t.Errorf("detach summary %+v does not match its trial", d)
		}
	}

	if l := sc.Latency; l == nil || l.Tasks != 20 || len(l.Trials) != 20 {
		t.Errorf("latency: %+v, want 20 tasks", l)
	} else if !(0 < l.P50MS && l.P50MS <= l.P99MS && l.P99MS <= l.MaxMS) {
		t.Errorf("latency: p50 %g, p99 %g, max %g out of order", l.P50MS, l.P99MS, l.MaxMS)
	}

	if c := sc.S3Cost; c == nil || len(c.Trials) != 1 {
		t.Errorf("s3cost: %+v, want one trial", c)
	} else {
		cl := c.PerTaskClasses
		if cl.PutClass > 4 || cl.GetClass > 1 || cl.Delete > 1 || c.PerTask["list"] > 0 || cl.PutClass < 2 {
			t.Errorf("happy path per task: %+v (%v), want ≤ 4 PUT-class, ≤ 1 GET, ≤ 1 DELETE, no LIST", cl, c.PerTask)
		}
		if c.Idle.WindowS != 5 || !c.Idle.Scaled {
			t.Errorf("quick idle window: %+v, want 5s, scaled", c.Idle)
		}
		if m := c.Cost; m.TotalUSD <= 0 || m.TotalUSD != round2(m.TaskRequestsUSD+m.IdleRequestsUSD) || m.Formula == "" || m.Runners != 50 || m.TasksPerDay != 100_000 {
			t.Errorf("monthly cost: %+v", m)
		}
	}

	if a := sc.Assign; a == nil || len(a.Cases) != 9 {
		t.Errorf("assign: %+v, want 3 × 3 cases", a)
	} else {
		for _, c := range a.Cases {
			if c.AssignMS <= 0 || c.ReassignMS <= 0 {
				t.Errorf("assign case %+v: want positive timings", c)
			}
		}
	}
	if !strings.Contains(stderr, "bench: s3cost: done") {
		t.Errorf("no progress on stderr:\n%s", stderr)
	}
}

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// processesOf returns the command lines of the processes whose command
// line mentions dir (the runner processes of a bench run whose data
// directory is dir); ok is false where /proc is not available.
func processesOf(dir string) (cmds []string, ok bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, dir) && strings.Contains(cmd, " run ") {
			cmds = append(cmds, cmd)
		}
	}
	return cmds, true
}

// TestBenchChildProcesses runs the scenarios that signal runner
// processes, then interrupts a run: its children must be gone either way.
func TestBenchChildProcesses(t *testing.T) {
	infra := sharedInfra(t)
	bin := buildTenure(t)
	base := bench.Options{Infra: infra, Executable: bin}

	t.Run("failover and handoff", func(t *testing.T) {
		ctx := testCtx(t, 5*time.Minute)
		dir := filepath.Join(t.TempDir(), "data")
		stdout, stderr, err := runBenchCmd(ctx, t, base, "failover", "handoff", "--quick", "--json", "--data", dir)
		if err != nil {
			t.Fatalf("bench: %v\nstderr:\n%s", err, stderr)
		}
		out := decodeBench(t, stdout)
		for name, r := range map[string]*bench.HandoverResult{"failover": out.Scenarios.Failover, "handoff": out.Scenarios.Handoff} {
			if r == nil || len(r.Trials) != 1 {
				t.Fatalf("%s: %+v, want one trial", name, r)
			}
			tr := r.Trials[0]
			if tr.Shards < 1 || tr.MS <= 0 || r.MedianMS != tr.MS || r.Shards != 64 || r.Runners != 3 {
				t.Errorf("%s: %+v", name, r)
			}
			if want := tr.MS / r.LeaseTTLMS; tr.XTTL < want-0.001 || tr.XTTL > want+0.001 {
				t.Errorf("%s: x_ttl %g, want ms/ttl = %g", name, tr.XTTL, want)
			}
		}
		if code := out.Scenarios.Handoff.Trials[0].ExitCode; code != 0 {
			t.Errorf("handoff: the SIGTERMed runner exited %d, want 0", code)
		}
		if code := out.Scenarios.Failover.Trials[0].ExitCode; code != -1 {
			t.Errorf("failover: the SIGKILLed runner exit code %d, want -1 (killed)", code)
		}
		if left, ok := processesOf(dir); ok && len(left) > 0 {
			t.Errorf("runner processes left after the run:\n%s", strings.Join(left, "\n"))
		}
	})

	t.Run("interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(testCtx(t, 5*time.Minute))
		dir := filepath.Join(t.TempDir(), "data")
		type result struct {
			stderr string
			err    error
		}
		done := make(chan result, 1)
		go func() {
			_, stderr, err := runBenchCmd(ctx, t, base, "failover", "--trials", "5", "--data", dir)
			done <- result{stderr, err}
		}()
		if _, ok := processesOf(dir); !ok {
			cancel()
			<-done
			t.Skip("no /proc: cannot see the runner processes")
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			if procs, _ := processesOf(dir); len(procs) == 3 {
				break
			}
			select {
			case r := <-done:
				t.Fatalf("bench ended before its runners started: %v\n%s", r.err, r.stderr)
			default:
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatal("the 3 runner processes did not start")
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel() // what the first Ctrl-C does
		var r result
		select {
		case r = <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("bench did not stop within 60s of its interruption")
		}
		if r.err == nil || !strings.Contains(r.err.Error(), "interrupted") {
			t.Fatalf("interrupted bench: %v, want an error saying so", r.err)
		}
		if left, _ := processesOf(dir); len(left) > 0 {
			t.Fatalf("runner processes left after the interruption:\n%s", strings.Join(left, "\n"))
		}
		if logs, err := os.ReadDir(filepath.Join(dir, "logs")); err != nil || len(logs) == 0 {
			t.Errorf("the runners' logs are not kept in %s/logs: %v", dir, err)
		}
	})
}

// TestBenchBinary runs `tenure bench` as users do, with its own embedded
// servers: stdout must hold the JSON report alone (the S3 gateway prints a
// notice on stdout, which the bench diverts).
func TestBenchBinary(t *testing.T) {
	bin := buildTenure(t)
	ctx := testCtx(t, 3*time.Minute)
	if out, err := exec.CommandContext(ctx, bin, "bench", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "failover") {
		t.Fatalf("tenure bench --help: %v; want the scenarios listed:\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "data")
	cmd := exec.CommandContext(ctx, bin, "bench", "latency", "--quick", "--json", "--data", dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tenure bench: %v\nstderr:\n%s", err, stderr.String())
	}
	out := decodeBench(t, stdout.String())
	if out.Scenarios.Latency == nil || out.Scenarios.Latency.Tasks != 20 {
		t.Fatalf("latency: %+v", out.Scenarios.Latency)
	}
	for _, sub := range []string{"etcd", "s3", "logs"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); err != nil {
			t.Errorf("--data %s: %v", dir, err)
		}
	}
}

// TestBenchS3Latency runs throughput, latency-profile and renewal quickly
// with --s3-latency: the ratio to the S3 ceiling is there with the mix it
// replayed, latency-profile measures the one round trip given (no task
// starts sooner than one round trip after its submit), and renewal counts
// the bytes of a renewal PUT and reports what the server does with a
// metadata-only copy.
func TestBenchS3Latency(t *testing.T) {
	infra := sharedInfra(t)
	ctx := testCtx(t, 3*time.Minute)
	stdout, stderr, err := runBenchCmd(ctx, t, bench.Options{Infra: infra}, "throughput", "latency-profile", "renewal",
		"--quick", "--json", "--s3-latency", "5ms,jitter=2ms", "--data", filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr)
	}
	out := decodeBench(t, stdout)
	if l := out.Settings.S3Latency; l == nil || l.RTTMS != 5 || l.JitterMS != 2 {
		t.Errorf("settings: S3 latency %+v, want 5ms with 2ms jitter", l)
	}
	th := out.Scenarios.Throughput
	if th == nil || th.Ceiling == nil || th.Ceiling3 == nil || th.CeilingTasksPerS <= 0 || th.Ratio <= 0 || th.Ratio3 <= 0 || len(th.Ceiling.Trials) != 1 ||
		len(th.Ceiling3.Trials) != 1 || th.Ceiling.Workers < 1 || !slices.Contains(th.Ceiling.Sequence, "create") || th.PerTask["create"] != 1 {
		t.Fatalf("throughput: %+v, ceiling %+v: want a ceiling beside each runner count, with a ratio and the replayed mix", th, th.Ceiling)
	}
	// Each ceiling goes through a proxy of its own: exactly its sequences
	// on the wire, not the idle runners' requests beside them.
	for _, c := range []*bench.Ceiling{th.Ceiling, th.Ceiling3} {
		if tr := c.Trials[0]; tr.Requests != tr.Tasks*len(c.Sequence) {
			t.Errorf("ceiling trial %+v: %d requests on the wire, want %d per task-equivalent", tr, tr.Requests, len(c.Sequence))
		}
	}
	t.Logf("throughput %.0f tasks/s, ceiling %.0f task-equivalents/s of %v: ratio %.2f", th.OneRunner, th.CeilingTasksPerS, th.Ceiling.Sequence, th.Ratio)
	lp := out.Scenarios.LatencyProfile
	if lp == nil || len(lp.Profiles) != 1 || lp.Profiles[0].S3Latency.RTT != 5*time.Millisecond || lp.Profiles[0].SubmitToStart.P50MS < 5 {
		t.Fatalf("latency-profile: %+v, want one profile at 5ms with p50 ≥ 5ms", lp)
	}
	r := out.Scenarios.Renewal
	if r == nil || r.Renewals < 1 || r.PutBodyBytes < r.InputBytes || r.PutSentBytes <= r.PutBodyBytes || r.Decision == "" {
		t.Fatalf("renewal: %+v, want renewals of the whole task object counted in bytes, and a decision", r)
	}
	if c := r.Copy; !c.Supported || !c.StaleRefused || c.Calls < 1 || c.CopySentBytes <= 0 || c.CopySentBytes >= r.PutSentBytes {
		t.Errorf("metadata-only copy on VersityGW: %+v, want it supported, a stale ETag refused and fewer bytes sent than a PUT", c)
	}
	t.Logf("renewal: %d PUTs of %d bytes; copy %+v; %s", r.Renewals, r.PutSentBytes, r.Copy, r.Decision)
}
