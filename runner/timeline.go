package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/console"
	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/sharding"
)

// The runner's timeline (GET /debug/timeline, the console's timeline
// view): its recent events in a console.Timeline, recorded where they
// happen. Recording is a ring write, with no I/O, so that it may run on
// the paths it watches: the detachment machine's delivery, the lease's
// keep-alive loop.

// recordTransition records a detachment transition (the machine's
// subscriber): a storage error that caused it first, as its own event.
func (r *Runner) recordTransition(t detachment.Transition) {
	e := console.Event{At: t.At, Reason: string(t.Reason), Generation: t.Generation}
	switch t.Kind {
	case detachment.Attached:
		e.Kind = console.EventAttached
		e.Detail = "after " + string(t.Reason)
	case detachment.Detached:
		e.Kind = console.EventDetached
	case detachment.WouldDetach:
		e.Kind = console.EventWouldDetach
		e.Detail = "observe mode: nothing interrupted"
	case detachment.WouldAttach:
		e.Kind = console.EventWouldAttach
		e.Detail = "observe mode, after " + string(t.Reason)
	default:
		return
	}
	if t.Kind == detachment.Detached || t.Kind == detachment.WouldDetach {
		if t.Reason == detachment.ReasonStorageError {
			se := console.Event{At: t.At, Kind: console.EventStorageError, Generation: t.Generation, Detail: "etcd failed past the storage error grace"}
			if t.Err != nil {
				se.Detail = t.Err.Error()
			}
			r.timeline.Add(se)
		}
		if t.Err != nil {
			e.Detail = t.Err.Error()
		}
		if !t.Deadline.IsZero() {
			e.Detail = joinDetail(e.Detail, fmt.Sprintf("lease deadline lag %s", t.Deadline.Sub(t.At).Round(time.Millisecond)))
		}
	}
	r.timeline.Add(e)
}

// recordLease records an event of the lease (sharding.WithEvents).
func (r *Runner) recordLease(ev sharding.Event) {
	e := console.Event{At: ev.At}
	switch ev.Kind {
	case sharding.EventKeepAliveFailed:
		e.Kind = console.EventKeepAliveFailed
	case sharding.EventKeepAliveRecovered:
		e.Kind = console.EventKeepAliveRecovered
		e.Detail = fmt.Sprintf("after %d failed keep-alive(s)", ev.Streak)
	case sharding.EventLeaseLost:
		e.Kind = console.EventLeaseLost
	default:
		return
	}
	if ev.Err != nil {
		e.Detail = joinDetail(e.Detail, ev.Err.Error())
	}
	r.timeline.Add(e)
}

// recordMode records a change of the detachment mode by the dynamic
// config.
func (r *Runner) recordMode(from, to detachment.Mode, version int64) {
	if from == to {
		return
	}
	r.timeline.Add(console.Event{Kind: console.EventModeChanged,
		Detail: fmt.Sprintf("%s → %s (dynamic config version %d)", from, to, version)})
}

// record records an event of the runner's own.
func (r *Runner) record(kind console.EventKind, detail string) {
	r.timeline.Add(console.Event{Kind: kind, Detail: detail})
}

func joinDetail(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// activitySamples is how many seconds of samples the rates span.
const activitySamples = 10

// activity measures the runner's rates of served calls and completed
// tasks from the host's counters, sampled once a second by a goroutine of
// the runner's lifecycle.Stopper: the rate is the change over the last
// activitySamples seconds (less just after the start).
type activity struct {
	samples [activitySamples + 1]activitySample
	n       int // samples taken (the ring's next slot is n % len)
}

type activitySample struct {
	at           time.Time
	calls, tasks uint64
}

// sampleActivity samples the host's counters every second until ctx ends.
func (r *Runner) sampleActivity(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	r.takeSample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			r.takeSample()
		}
	}
}

func (r *Runner) takeSample() {
	_, host := r.parts()
	if host == nil {
		return
	}
	a := host.Activity()
	s := activitySample{at: time.Now(), calls: a.Messages, tasks: a.TasksCompleted}
	r.mu.Lock()
	r.act.samples[r.act.n%len(r.act.samples)] = s
	r.act.n++
	r.mu.Unlock()
}

// rates returns calls and tasks per second over the samples (nil before
// two samples exist). Under r.mu.
func (a *activity) rates() (calls, tasks *float64) {
	if a.n < 2 {
		return nil, nil
	}
	last := a.samples[(a.n-1)%len(a.samples)]
	first := a.samples[0]
	if a.n > len(a.samples) {
		first = a.samples[a.n%len(a.samples)]
	}
	dt := last.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return nil, nil
	}
	c := float64(last.calls-first.calls) / dt
	t := float64(last.tasks-first.tasks) / dt
	return &c, &t
}
