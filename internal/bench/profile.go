package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

// Latency profile settings.
const (
	// profileSubmitters submit a profile's throughput batch: enough that
	// submitting (two S3 round trips and an etcd wake-up per task) does not
	// bound the runner's rate at 20ms; fewer in a quick run, whose 128
	// goroutines under the race detector starved the runner's keep-alives
	// on two shared cores.
	profileSubmitters      = 128
	profileSubmittersQuick = 32
	// profileWarmup tasks run before the measured submit → start ones.
	profileWarmup   = 3
	typeProfileNoop = "bench-profile-noop"
	typeProfilePing = "bench-profile-ping"
	typeProfileFIFO = "bench-profile-fifo"
	// profileEntity is the entity of the FIFO tasks.
	profileEntity = "fifo-1"
	// The task path's targets at 20ms (BENCHMARKS.md), in round trips and tasks/s.
	targetSubmitToStartRTTs = 3
	targetTasksPerS         = 500
	targetFIFOGapRTTs       = 3
)

// DefaultS3Latencies are the round trips latency-profile measures unless
// Options.S3Latency names one: AWS S3 Standard's small-request latency
// (tens of ms) and S3 Express One Zone's (single-digit ms).
var DefaultS3Latencies = []S3Latency{{RTT: 20 * time.Millisecond}, {RTT: 5 * time.Millisecond}}

// LatencyProfileResult holds the figures of latency-profile: the task
// path with a simulated S3 round trip on every request of the runner and
// the submitters, one profile per round trip.
type LatencyProfileResult struct {
	Profiles []LatencyProfile `json:"profiles"`
}

// LatencyProfile is one round trip's figures, each also as a multiple of
// the round trip (RTT), and whether the task path's targets are met (they are
// set for 20ms; at other round trips they read the same in round trips,
// and 500 tasks/s).
type LatencyProfile struct {
	S3Latency S3Latency `json:"s3_latency"`
	Shards    int       `json:"shards"`
	// SubmitToStart: one task at a time, from the Submit call to the
	// handler's start.
	SubmitToStart ProfileLatency `json:"submit_to_start"`
	// Throughput: no-op tasks/s of one runner with the default
	// concurrency, first submit to last completion, submitted from
	// Submitters goroutines; median over trials.
	Throughput ProfileThroughput `json:"throughput"`
	// FIFO: the tasks of one entity, queued up, one after the other.
	FIFO    ProfileFIFO    `json:"fifo"`
	Targets ProfileTargets `json:"targets"`
}

// ProfileLatency is submit → start.
type ProfileLatency struct {
	Tasks  int       `json:"tasks"`
	P50MS  float64   `json:"p50_ms"`
	P99MS  float64   `json:"p99_ms"`
	P50RTT float64   `json:"p50_rtt"`
	P99RTT float64   `json:"p99_rtt"`
	Trials []float64 `json:"trials"`
}

// ProfileThroughput is one runner's rate.
type ProfileThroughput struct {
	Tasks      int       `json:"tasks_per_trial"`
	Submitters int       `json:"submitters"`
	TasksPerS  float64   `json:"tasks_per_s"`
	TasksPerRT float64   `json:"tasks_per_rtt"`
	Trials     []float64 `json:"trials"` // tasks/s
}

// ProfileFIFO is one entity's sequential rate: Gap is the time from the
// end of one of its tasks' handler to the start of the next's (all
// already submitted), TasksPerS the tasks started per second.
type ProfileFIFO struct {
	Tasks     int     `json:"tasks"`
	GapP50MS  float64 `json:"gap_p50_ms"`
	GapP99MS  float64 `json:"gap_p99_ms"`
	GapP50RTT float64 `json:"gap_p50_rtt"`
	TasksPerS float64 `json:"tasks_per_s"`
	// TargetTasksPerS is 1 / (3 round trips).
	TargetTasksPerS float64   `json:"target_tasks_per_s"`
	Gaps            []float64 `json:"gaps_ms"`
}

// ProfileTargets say whether the task path's targets are met.
type ProfileTargets struct {
	SubmitToStartP50 bool `json:"submit_to_start_p50_le_3_rtt"`
	TasksPerS        bool `json:"tasks_per_s_ge_500"`
	FIFO             bool `json:"fifo_ge_1_per_3_rtt"`
}

func runLatencyProfile(ctx context.Context, e *env) (Result, error) {
	lats := DefaultS3Latencies
	if e.o.S3Latency != nil {
		lats = []S3Latency{*e.o.S3Latency}
	}
	res := &LatencyProfileResult{}
	for _, l := range lats {
		p, err := latencyProfile(ctx, e, l)
		if err != nil {
			return nil, fmt.Errorf("bench: %s at %s: %w", ScenarioLatencyProfile, l, err)
		}
		res.Profiles = append(res.Profiles, *p)
	}
	return res, nil
}

// fifoLog records the handler start and end of the FIFO tasks by index;
// the first task waits for gate so that the others queue up behind it.
type fifoLog struct {
	mu         sync.Mutex
	start, end map[int]time.Time
	gate       chan struct{}
	done       chan struct{}
	n          int
}

func (f *fifoLog) handler(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	var in struct{ I int }
	if err := json.Unmarshal(t.Input, &in); err != nil {
		return nil, entity.Permanent(err)
	}
	f.mu.Lock()
	f.start[in.I] = time.Now()
	f.mu.Unlock()
	if in.I == 0 {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	f.end[in.I] = time.Now()
	if len(f.end) == f.n {
		close(f.done)
	}
	f.mu.Unlock()
	return nil, nil
}

func latencyProfile(ctx context.Context, e *env, l S3Latency) (*LatencyProfile, error) {
	c, err := e.newClusterWith(ctx, ScenarioLatencyProfile, taskShards, &l)
	if err != nil {
		return nil, err
	}
	started := make(chan time.Time)
	fifo := &fifoLog{start: map[int]time.Time{}, end: map[int]time.Time{}, gate: make(chan struct{}), done: make(chan struct{}),
		n: pick(e.o, 30, 10)} // at least 3: two intervals after the gated first
	register := func(h *entity.Host) error {
		if err := pingType(typeProfilePing, started)(h); err != nil {
			return err
		}
		if err := h.RegisterFunc(typeProfileFIFO, fifo.handler); err != nil {
			return err
		}
		return h.RegisterFunc(typeProfileNoop, func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil })
	}
	rs, tc, err := c.runnersAndClient(ctx, 1, register)
	if err != nil {
		return nil, err
	}
	defer stopRunners(rs)
	rtt := l.RTT + l.Jitter/2 // the mean round trip
	inRTT := func(msv float64) float64 { return round(msv/ms(rtt), 2) }
	p := &LatencyProfile{S3Latency: l, Shards: taskShards}
	within := 10*time.Second + 100*rtt

	// Submit → start, one task at a time.
	n := pick(e.o, 40, 10)
	trials, err := submitToStart(ctx, tc, typeProfilePing, started, profileWarmup, n, within, rs[0].logPath)
	if err != nil {
		return nil, err
	}
	s := &p.SubmitToStart
	s.Tasks, s.Trials = n, trials
	s.P50MS, s.P99MS = quantile(trials, 0.5), quantile(trials, 0.99)
	s.P50RTT, s.P99RTT = inRTT(s.P50MS), inRTT(s.P99MS)
	e.logf("%s at %s: submit → start p50 %.1fms (%.2f RTT), p99 %.1fms (%.2f RTT)", ScenarioLatencyProfile, l, s.P50MS, s.P50RTT, s.P99MS, s.P99RTT)

	// One runner's rate with its default concurrency.
	th := &p.Throughput
	th.Tasks, th.Submitters = pick(e.o, 1000, 100), pick(e.o, profileSubmitters, profileSubmittersQuick)
	for i := range e.trials {
		base, err := completed(registries(rs), typeProfileNoop)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		refs, err := submitBatch(ctx, tc, typeProfileNoop, th.Tasks, th.Submitters)
		if err != nil {
			return nil, err
		}
		if err := waitCompleted(ctx, rs, tc, refs, typeProfileNoop, base+float64(th.Tasks), batchWithin); err != nil {
			return nil, err
		}
		rate := float64(th.Tasks) / time.Since(t0).Seconds()
		th.Trials = append(th.Trials, round(rate, 1))
		e.logf("%s at %s: trial %d/%d: %.0f tasks/s", ScenarioLatencyProfile, l, i+1, e.trials, rate)
	}
	th.TasksPerS = round(median(th.Trials), 1)
	th.TasksPerRT = round(th.TasksPerS*rtt.Seconds(), 2)

	// One entity's FIFO.
	if err := fifoRun(ctx, tc, fifo, within); err != nil {
		return nil, err
	}
	f := &p.FIFO
	f.Tasks = fifo.n
	for i := 1; i < fifo.n; i++ {
		f.Gaps = append(f.Gaps, ms(fifo.start[i].Sub(fifo.end[i-1])))
	}
	f.GapP50MS, f.GapP99MS = quantile(f.Gaps, 0.5), quantile(f.Gaps, 0.99)
	f.GapP50RTT = inRTT(f.GapP50MS)
	// Task 0 waited for the gate: the rate is over the start-to-start
	// intervals of tasks 1 … n−1.
	f.TasksPerS = round(float64(fifo.n-2)/fifo.start[fifo.n-1].Sub(fifo.start[1]).Seconds(), 1)
	f.TargetTasksPerS = round(1/(targetFIFOGapRTTs*rtt.Seconds()), 1)
	e.logf("%s at %s: FIFO gap p50 %.1fms (%.2f RTT), %.1f tasks/s", ScenarioLatencyProfile, l, f.GapP50MS, f.GapP50RTT, f.TasksPerS)

	p.Targets = ProfileTargets{SubmitToStartP50: s.P50RTT <= targetSubmitToStartRTTs, TasksPerS: th.TasksPerS >= targetTasksPerS,
		FIFO: f.TasksPerS >= f.TargetTasksPerS}
	return p, nil
}

// fifoRun submits the FIFO tasks to one entity in order, then lets the
// first one end, and waits for them all.
func fifoRun(ctx context.Context, tc *task.Client, fifo *fifoLog, within time.Duration) error {
	for i := range fifo.n {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, _, err := tc.Submit(sctx, task.SubmitRequest{Type: typeProfileFIFO, Entity: profileEntity, Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		cancel()
		if err != nil {
			return fmt.Errorf("FIFO submit: %w", err)
		}
	}
	close(fifo.gate)
	select {
	case <-fifo.done:
		return nil
	case <-time.After(within + time.Duration(fifo.n)*time.Second):
		fifo.mu.Lock()
		defer fifo.mu.Unlock()
		return fmt.Errorf("%d of %d FIFO tasks ended", len(fifo.end), fifo.n)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *LatencyProfileResult) rows() []row {
	var out []row
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	for _, p := range r.Profiles {
		s, th, f, t := p.SubmitToStart, p.Throughput, p.FIFO, p.Targets
		at := "RTT " + p.S3Latency.String()
		out = append(out,
			row{at + ": submit → start", fmt.Sprintf("p50 %.1fms (%.2f RTT), p99 %.1fms (%.2f RTT); target p50 ≤ 3 RTT: %s", s.P50MS, s.P50RTT, s.P99MS, s.P99RTT, mark(t.SubmitToStartP50))},
			row{at + ": tasks/s, 1 runner", fmt.Sprintf("%.0f (%.2f per RTT; trials %s); target ≥ 500: %s", th.TasksPerS, th.TasksPerRT, strings.Trim(fmt.Sprint(th.Trials), "[]"), mark(t.TasksPerS))},
			row{at + ": one entity's FIFO", fmt.Sprintf("%.1f tasks/s, gap end → next start p50 %.1fms (%.2f RTT), p99 %.1fms; target ≥ %.1f/s: %s", f.TasksPerS, f.GapP50MS, f.GapP50RTT, f.GapP99MS, f.TargetTasksPerS, mark(t.FIFO))})
	}
	return out
}
