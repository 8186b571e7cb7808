package entity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// How a shard executor's ownership ends: the manager says whether by a
// handoff or a loss (fate), the loop stops taking work and the workers
// finish (shardPhase), the handlers get the interrupt timeout to return
// (awaitInterrupt, reportOverruns), and the shard's entities are stopped
// (residency.stopAll).

// shardPhase is where an ownership's executor is in its life. It moves
// only forward, through enter, which refuses any other move.
type shardPhase uint8

const (
	// phaseRunning: the loop takes work; messages are admitted.
	phaseRunning shardPhase = iota
	// phaseClosing: the ownership has ended and the loop has returned:
	// nothing is admitted any more, and the executor waits for its
	// workers (handlers, commits, messages, sweep, singletons).
	phaseClosing
	// phaseStopping: every worker has returned; the entities' OnStop
	// hooks run (under the handoff context in a planned release).
	phaseStopping
	// phaseStopped: everything the ownership started has returned;
	// stopped is closed.
	phaseStopped

	numShardPhases = iota
)

var shardPhaseNames = [numShardPhases]string{"running", "closing", "stopping", "stopped"}

func (p shardPhase) String() string {
	if int(p) < len(shardPhaseNames) {
		return shardPhaseNames[p]
	}
	return fmt.Sprintf("shardPhase(%d)", p)
}

// shardPhaseTransitions are the moves of an executor's phase, and why.
var shardPhaseTransitions = []struct {
	from, to shardPhase
	why      string
}{
	{phaseRunning, phaseClosing, "the ownership ended: the loop returned"},
	{phaseClosing, phaseStopping, "every worker returned"},
	{phaseStopping, phaseStopped, "the entities' OnStop hooks returned"},
}

var shardPhaseAllowed = func() (ok [numShardPhases][numShardPhases]bool) {
	for _, t := range shardPhaseTransitions {
		ok[t.from][t.to] = true
	}
	return ok
}()

// errPhaseTransition is wrapped by every refused move of a phase.
var errPhaseTransition = errors.New("entity: illegal shard executor phase transition")

// enter moves the executor to phase to, refusing (changing nothing) a
// move shardPhaseTransitions does not list. Entering phaseStopped closes
// stopped.
func (e *shardExec) enter(to shardPhase) error {
	e.sched.mu.Lock()
	from := e.sched.phase
	if int(to) >= numShardPhases || !shardPhaseAllowed[from][to] {
		e.sched.mu.Unlock()
		err := fmt.Errorf("%w: shard %s: %s → %s", errPhaseTransition, e.own.Shard, from, to)
		e.h.log.Error("refused a shard executor phase transition", "err", err)
		return err
	}
	e.sched.phase = to
	e.sched.mu.Unlock()
	if to == phaseStopped {
		close(e.stopped)
	}
	return nil
}

// fate is how an ownership ends, as the manager says: undecided until
// decide, then a handoff (ctx live while the lock is still held) or a
// loss. It is decided once; a later decide changes nothing.
type fate struct {
	decided chan struct{} // closed once decided
	once    sync.Once
	handoff context.Context // the handoff's context; nil: a loss
	wait    time.Duration   // how long await waits for the decision
}

// decide records how the ownership ends, once: a handoff (ctx live while
// the lock is held) or a loss (nil ctx).
func (f *fate) decide(ctx context.Context, handoff bool) {
	f.once.Do(func() {
		if handoff {
			f.handoff = ctx
		}
		close(f.decided)
	})
}

// await waits for the manager's decision on how the ownership ends, which
// comes right after the ownership context is cancelled: the handoff
// context, or nil for a loss (or no decision in time).
func (f *fate) await() (handoff context.Context) {
	t := time.NewTimer(f.wait)
	defer t.Stop()
	select {
	case <-f.decided:
		return f.handoff
	case <-t.C:
		return nil
	}
}

// waitStopped waits, up to ctx, for everything the ownership started to
// return: handlers, commits and OnStop hooks. It reports whether they all
// did; those still running are counted and named.
func (e *shardExec) waitStopped(ctx context.Context, why string) bool {
	select {
	case <-e.stopped:
		return true
	case <-ctx.Done():
	}
	e.reportOverruns(why)
	return false
}

// awaitInterrupt gives the handlers of an ended ownership the interrupt
// timeout to return, then counts and names those that did not.
func (e *shardExec) awaitInterrupt(why string) {
	ctx, cancel := context.WithTimeout(context.Background(), e.h.cfg.InterruptTimeout)
	defer cancel()
	if e.waitStopped(ctx, why) {
		return
	}
	start := time.Now()
	<-e.stopped
	e.h.log.Info("overrunning handlers of an ended ownership have returned", "shard", e.own.Shard.String(),
		"epoch", e.own.Epoch, "after", time.Since(start)+e.h.cfg.InterruptTimeout)
}

// reportOverruns counts and names the handlers still running after the
// wait that followed an interruption: they ignore their context.
func (e *shardExec) reportOverruns(why string) {
	e.sched.mu.Lock()
	type overrun struct {
		ref, typ string
		running  time.Duration
	}
	var list []overrun
	for _, a := range e.sched.inflight {
		t, _ := a.current()
		list = append(list, overrun{t.Ref(), t.Type, time.Since(a.started)})
	}
	for c := e.sched.calls.head; c != nil; c = c.next {
		ref := "message " + c.msg.Type + "/" + c.msg.ID
		list = append(list, overrun{ref, c.msg.Type, time.Since(c.started)})
	}
	e.sched.mu.Unlock()
	// Named before counted: whoever sees the count (an alert) finds the
	// names in the log.
	for _, o := range list {
		e.h.log.Warn("handler still running after the interrupt wait; it ignores its context",
			"shard", e.own.Shard.String(), "epoch", e.own.Epoch, "interrupted_by", why,
			"task", o.ref, "type", o.typ, "running_for", o.running.Round(time.Millisecond),
			"waited", e.h.cfg.InterruptTimeout)
	}
	e.h.metrics.stuck.Add(float64(len(list)))
}

// stopHookConcurrency bounds the OnStop hooks of one shard running at once.
const stopHookConcurrency = 32
