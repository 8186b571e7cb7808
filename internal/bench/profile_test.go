package bench

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/s3count"
)

func TestParseS3Latency(t *testing.T) {
	for in, want := range map[string]S3Latency{
		"20ms":                {RTT: 20 * time.Millisecond},
		"20ms,jitter=10ms":    {RTT: 20 * time.Millisecond, Jitter: 10 * time.Millisecond},
		" 5ms , jitter = 1ms": {RTT: 5 * time.Millisecond, Jitter: time.Millisecond},
	} {
		got, err := ParseS3Latency(in)
		if err != nil || got != want {
			t.Errorf("ParseS3Latency(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if back, err := ParseS3Latency(got.String()); err != nil || back != got {
			t.Errorf("%q does not read back: %+v, %v", got.String(), back, err)
		}
		var back S3Latency
		if b, err := json.Marshal(got); err != nil || json.Unmarshal(b, &back) != nil || back != got {
			t.Errorf("%+v: JSON %s reads back as %+v (%v)", got, b, back, err)
		}
	}
	for _, in := range []string{"", "20", "0ms", "-5ms", "20ms,jit=1ms", "20ms,jitter=x", "20ms,jitter=-1ms", "9s,jitter=2s"} {
		if _, err := ParseS3Latency(in); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("ParseS3Latency(%q): %v, want ErrInvalidOptions", in, err)
		}
	}
	if err := (Options{Scenarios: []string{All}, S3Latency: &S3Latency{}}).Validate(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("Validate with a zero S3 latency: %v, want ErrInvalidOptions", err)
	}
}

// TestNewCeiling: the sequence is the wire mix rounded to whole requests
// in the task path's order, with the mean body sizes, and what cannot or
// need not be replayed is named.
func TestNewCeiling(t *testing.T) {
	counts := s3count.Counts{
		Requests:  map[s3count.Op]int{"put": 100, "create": 100, "get": 100, "replace": 200, "delete": 100, "head_bucket": 1, "list": 30, "copy": 100},
		BodyBytes: map[s3count.Op]int{"create": 30000, "replace": 80000},
	}
	c := newCeiling(counts, 100, 0)
	if want := []string{"put", "create", "get", "replace", "replace", "delete"}; !slices.Equal(c.Sequence, want) {
		t.Errorf("sequence %v, want %v", c.Sequence, want)
	}
	if !slices.Equal(c.Skipped, []string{"copy", "head_bucket", "list"}) {
		t.Errorf("skipped %v", c.Skipped)
	}
	if c.BodyBytes["create"] != 300 || c.BodyBytes["replace"] != 400 || len(c.bodies[s3count.OpReplace]) != 400 || c.Workers != 1 {
		t.Errorf("bodies %v, workers %d", c.BodyBytes, c.Workers)
	}
	if c.Mix["list"] != 0.3 || c.Mix["replace"] != 2 {
		t.Errorf("mix %v", c.Mix)
	}
}

// TestLatencyProfileScenario runs latency-profile quickly at its default
// round trips: every figure is there, and no task starts sooner than one
// round trip after its submit (its object is created by one S3 request
// first). Targets are reported, not asserted.
func TestLatencyProfileScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress strings.Builder
	rep, err := Run(ctx, Options{Scenarios: []string{ScenarioLatencyProfile}, Quick: true, Infra: sharedInfra(t),
		DataDir: filepath.Join(t.TempDir(), "data"), Progress: &progress})
	if err != nil {
		t.Fatalf("bench latency-profile: %v\n%s", err, progress.String())
	}
	r, ok := rep.Scenarios[ScenarioLatencyProfile].(*LatencyProfileResult)
	if !ok || len(r.Profiles) != len(DefaultS3Latencies) {
		t.Fatalf("latency-profile result: %#v", rep.Scenarios[ScenarioLatencyProfile])
	}
	for i, p := range r.Profiles {
		rtt := ms(DefaultS3Latencies[i].RTT)
		s, th, f := p.SubmitToStart, p.Throughput, p.FIFO
		if p.S3Latency != DefaultS3Latencies[i] || s.Tasks != 10 || len(s.Trials) != 10 || s.P50MS < rtt || s.P99MS < s.P50MS || s.P50RTT < 1 {
			t.Errorf("at %s: submit → start %+v, want 10 tasks, p50 ≥ one round trip", p.S3Latency, s)
		}
		if th.TasksPerS <= 0 || len(th.Trials) != 1 || f.Tasks != 10 || len(f.Gaps) != 9 || f.TasksPerS <= 0 || f.GapP50MS <= 0 {
			t.Errorf("at %s: throughput %+v, FIFO %+v", p.S3Latency, th, f)
		}
		t.Logf("at %s: submit → start p50 %.1fms (%.2f RTT); %.0f tasks/s; FIFO %.1f/s, gap %.2f RTT; targets %+v",
			p.S3Latency, s.P50MS, s.P50RTT, th.TasksPerS, f.TasksPerS, f.GapP50RTT, p.Targets)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "RTT 20ms: one entity's FIFO") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
}
