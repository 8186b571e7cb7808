package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// AssignResult holds the figures of assign: the compute time of
// placement.Assign (a cold start: every shard placed) and of
// placement.Reassign (one runner joining n, from the current owners), one
// group, equal weights, median of the trials.
type AssignResult struct {
	Runs       int            `json:"runs"`
	Cases      []AssignCase   `json:"cases"`
	Trials     []AssignTiming `json:"trials"`
	GOMAXPROCS int            `json:"gomaxprocs"`
}

// AssignCase is the median timing of one size.
type AssignCase struct {
	Shards     int     `json:"shards"`
	Runners    int     `json:"runners"`
	AssignMS   float64 `json:"assign_ms"`
	ReassignMS float64 `json:"reassign_ms"`
}

// AssignTiming is one run of one size.
type AssignTiming struct {
	Shards     int     `json:"shards"`
	Runners    int     `json:"runners"`
	AssignMS   float64 `json:"assign_ms"`
	ReassignMS float64 `json:"reassign_ms"`
}

// The sizes measured: shards per group × runners.
var (
	assignShards  = []int{256, 4096, 16384}
	assignRunners = []int{3, 100, 1000}
)

func runAssign(ctx context.Context, e *env) (Result, error) {
	res := &AssignResult{Runs: e.trials, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	groups := []string{storage.DefaultGroup}
	for _, shards := range assignShards {
		for _, n := range assignRunners {
			cands := make([]placement.Candidate, n+1)
			for i := range cands {
				cands[i] = placement.Candidate{ID: fmt.Sprintf("runner-%04d", i), Weight: 1}
			}
			var as, rs []float64
			current := placement.Assign(groups, shards, cands[:n])
			if len(current) != shards {
				return nil, fmt.Errorf("bench: assign %d shards to %d runners placed %d", shards, n, len(current))
			}
			for range e.trials {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				ta := perCall(func() { placement.Assign(groups, shards, cands[:n]) })
				tr := perCall(func() { placement.Reassign(groups, shards, cands, current) })
				if next := placement.Reassign(groups, shards, cands, current); len(next) != shards {
					return nil, fmt.Errorf("bench: reassign %d shards to %d runners placed %d", shards, n+1, len(next))
				}
				as, rs = append(as, ms(ta)), append(rs, ms(tr))
				res.Trials = append(res.Trials, AssignTiming{Shards: shards, Runners: n, AssignMS: ms(ta), ReassignMS: ms(tr)})
			}
			ac := AssignCase{Shards: shards, Runners: n, AssignMS: round(median(as), 3), ReassignMS: round(median(rs), 3)}
			res.Cases = append(res.Cases, ac)
			e.logf("assign: %d shards × %d runners: Assign %.3fms, Reassign %.3fms", shards, n, ac.AssignMS, ac.ReassignMS)
		}
	}
	return res, nil
}

// assignTrialSpan is the least time one trial of one function takes: the
// mean of as many calls as fill it (at least one), so that a call of a few
// milliseconds is not one sample of the scheduler's noise on a shared
// machine. Garbage is collected as it comes, as in a running manager.
const assignTrialSpan = 50 * time.Millisecond

// perCall returns the mean time of calls to f over at least
// assignTrialSpan.
func perCall(f func()) time.Duration {
	runtime.GC()
	calls := 0
	t0 := time.Now()
	for calls == 0 || time.Since(t0) < assignTrialSpan {
		f()
		calls++
	}
	return time.Since(t0) / time.Duration(calls)
}
