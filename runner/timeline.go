package runner

import (
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
			se := console.Event{At: t.At, Kind: console.EventStorageError, Generation: t.Generation, Detail: "the coordination store (" + CoordinationBackend(r.cfg) + ") failed past the storage error grace"}
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
