package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/storage"
)

// Handover scenario settings.
const (
	handoverRunners = 3
	handoverShards  = 64
	// failoverWithin bounds a crash failover: the lease TTL plus a watch
	// round trip is the promise; ten TTLs is a clear failure.
	failoverWithin = 10 * LeaseTTL
	// handoffWithin bounds a planned handoff (drain_timeout is 10s).
	handoffWithin = 30 * time.Second
	// exitWithin bounds a runner's exit after its signal.
	exitWithin = 30 * time.Second
)

// HandoverResult holds the figures of failover (SIGKILL) and handoff
// (SIGTERM): per trial, the time from the signal to the moment every shard
// the victim held is locked by another runner, as the bench's lock watch
// saw it.
type HandoverResult struct {
	Signal     string  `json:"signal"`
	Runners    int     `json:"runners"`
	Shards     int     `json:"shards"`
	LeaseTTLMS float64 `json:"lease_ttl_ms"`
	MedianMS   float64 `json:"median_ms"`
	MaxMS      float64 `json:"max_ms"`
	MedianXTTL float64 `json:"median_x_ttl"`
	MaxXTTL    float64 `json:"max_x_ttl"`
	// ShardGap*: per shard moved, from the deletion of the victim's lock
	// (released, or expired with its lease) to its next lock by another
	// runner, over every trial.
	ShardGapMedianMS float64         `json:"shard_gap_median_ms"`
	ShardGapP99MS    float64         `json:"shard_gap_p99_ms"`
	ShardGapMaxMS    float64         `json:"shard_gap_max_ms"`
	Trials           []HandoverTrial `json:"trials"`
}

// HandoverTrial is one signal.
type HandoverTrial struct {
	Victim   string  `json:"victim"`
	Shards   int     `json:"shards"` // shards the victim held
	MS       float64 `json:"ms"`
	XTTL     float64 `json:"x_ttl"`
	ExitCode int     `json:"exit_code"` // -1: killed by the signal
}

func runFailover(ctx context.Context, e *env) (Result, error) {
	return runHandover(ctx, e, ScenarioFailover, syscall.SIGKILL, failoverWithin)
}

func runHandoff(ctx context.Context, e *env) (Result, error) {
	return runHandover(ctx, e, ScenarioHandoff, syscall.SIGTERM, handoffWithin)
}

// runHandover starts three runner processes and, per trial, signals one
// of them, times the move of its shards, then restarts it and waits for
// the cluster to settle.
func runHandover(ctx context.Context, e *env, scenario string, sig syscall.Signal, within time.Duration) (Result, error) {
	c, err := e.newCluster(ctx, scenario, handoverShards)
	if err != nil {
		return nil, err
	}
	ids := make([]string, handoverRunners)
	procs := map[string]*child{}
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i+1)
		if procs[ids[i]], err = c.startChild(ids[i]); err != nil {
			return nil, err
		}
	}
	defer stopChildren(procs)
	alive := func() error { return childrenAlive(procs) }
	if err := c.convergedAlive(ctx, ids, alive); err != nil {
		return nil, err
	}
	res := &HandoverResult{Signal: signalName(sig), Runners: handoverRunners, Shards: handoverShards, LeaseTTLMS: ms(LeaseTTL)}
	var secs, ratios, gaps []float64
	for i := range e.trials {
		victim := ids[i%len(ids)]
		theirs := heldBy(c.locks.Holders(), victim)
		if len(theirs) == 0 {
			return nil, fmt.Errorf("bench: %s: runner %s holds no shard", scenario, victim)
		}
		t0 := time.Now()
		if err := procs[victim].signal(sig); err != nil {
			return nil, err
		}
		at, err := c.awaitReowned(ctx, victim, theirs, within)
		if err != nil {
			return nil, fmt.Errorf("bench: %s trial %d: %w", scenario, i+1, err)
		}
		code, err := procs[victim].wait(ctx, exitWithin)
		if err != nil {
			return nil, err
		}
		if sig == syscall.SIGTERM && code != 0 {
			return nil, fmt.Errorf("bench: %s: runner %s exited with code %d after SIGTERM, want 0 (log %s)", scenario, victim, code, procs[victim].logPath)
		}
		d := at.Sub(t0)
		gaps = append(gaps, shardGaps(c.locks.Since(t0), victim, theirs)...)
		tr := HandoverTrial{Victim: victim, Shards: len(theirs), MS: ms(d), XTTL: round(float64(d)/float64(LeaseTTL), 3), ExitCode: code}
		res.Trials = append(res.Trials, tr)
		secs, ratios = append(secs, tr.MS), append(ratios, tr.XTTL)
		e.logf("%s: trial %d/%d: %s's %d shards re-owned in %.1fms (%.2f×TTL)", scenario, i+1, e.trials, victim, len(theirs), tr.MS, tr.XTTL)
		if i == e.trials-1 {
			break
		}
		if procs[victim], err = c.startChild(victim); err != nil {
			return nil, err
		}
		if err := c.convergedAlive(ctx, ids, alive); err != nil {
			return nil, err
		}
	}
	res.MedianMS, res.MaxMS = round(median(secs), 3), maxOf(secs)
	res.MedianXTTL, res.MaxXTTL = round(median(ratios), 3), maxOf(ratios)
	res.ShardGapMedianMS, res.ShardGapP99MS, res.ShardGapMaxMS = round(median(gaps), 3), quantile(gaps, 0.99), maxOf(gaps)
	return res, nil
}

// heldBy returns the shards runner holds in holders.
func heldBy(holders map[storage.ShardID]string, runner string) []storage.ShardID {
	var out []storage.ShardID
	for s, h := range holders {
		if h == runner {
			out = append(out, s)
		}
	}
	return out
}

// awaitReowned returns when the lock watch saw every shard of theirs
// locked by a runner other than victim, within within.
func (c *cluster) awaitReowned(ctx context.Context, victim string, theirs []storage.ShardID, within time.Duration) (time.Time, error) {
	return c.locks.Await(ctx, fmt.Sprintf("the %d shards of %s to be locked by the others", len(theirs), victim), within,
		func(h map[storage.ShardID]string) bool {
			for _, s := range theirs {
				if h[s] == "" || h[s] == victim {
					return false
				}
			}
			return true
		})
}

// shardGaps returns, per shard of theirs, the time in ms from the deletion
// of victim's lock to the shard's next lock, from events in arrival order.
func shardGaps(events []harness.LockChange, victim string, theirs []storage.ShardID) []float64 {
	want := map[storage.ShardID]bool{}
	for _, s := range theirs {
		want[s] = true
	}
	deleted := map[storage.ShardID]time.Time{}
	var out []float64
	for _, ev := range events {
		if !want[ev.Shard] {
			continue
		}
		switch {
		case ev.Prev == victim && ev.Holder == "":
			deleted[ev.Shard] = ev.At
		case ev.Holder != "" && ev.Holder != victim:
			if t, ok := deleted[ev.Shard]; ok {
				out = append(out, ms(ev.At.Sub(t)))
				delete(want, ev.Shard)
			}
		}
	}
	return out
}

// convergedAlive is converged, failing early when alive reports a runner
// gone.
func (c *cluster) convergedAlive(ctx context.Context, ids []string, alive func() error) error {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if err := alive(); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
	err := c.converged(cctx, ids)
	close(stop)
	wg.Wait()
	if cause := context.Cause(cctx); err != nil && cause != nil && ctx.Err() == nil {
		return cause
	}
	return err
}

// childrenAlive returns an error naming the first child that has exited,
// with the end of its log.
func childrenAlive(procs map[string]*child) error {
	for id, ch := range procs {
		if ch.exited() {
			return fmt.Errorf("bench: runner process %s exited early: %v; log %s: %s", id, ch.err, ch.logPath, tail(ch.logPath, 3))
		}
	}
	return nil
}

// stopChildren stops every child gracefully, at once, SIGKILL after 15s.
func stopChildren(procs map[string]*child) {
	var wg sync.WaitGroup
	for _, ch := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); ch.stop(15 * time.Second) }()
	}
	wg.Wait()
}

// tail returns the last n lines of a file, joined by " | ".
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// signalName returns SIGKILL or SIGTERM.
func signalName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}
