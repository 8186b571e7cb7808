package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

// maxCounted bounds the due ticks one driver run walks, so that a cluster
// back after a long outage of an every-second schedule does not spin (the
// count, and under CatchUpOnce the tick fired, then stop there).
const maxCounted = 100_000

// Register registers the driver task type DriverType on t, driven by c:
// every runner of c's group registers it (runner does), so that whoever
// owns a schedule's shard runs its ticks.
func Register(t *entity.Types, c *Client) error {
	if c == nil {
		return &ValidationError{Field: "client", Rule: "must not be nil"}
	}
	return t.RegisterFunc(DriverType, c.drive)
}

// Result is a driver task's result: what it did for its tick.
type Result struct {
	// Stopped, when set, says why the chain ended here: "deleted",
	// "replaced" (another generation) or "paused". Nothing else is set then.
	Stopped string `json:"stopped,omitempty"`
	// Outcome is the tick's: on_time, late or skipped.
	Outcome string `json:"outcome,omitempty"`
	// Fired is the id of the task fired ("" when none was).
	Fired string `json:"fired,omitempty"`
	// LagMS is how late the driver reached its tick, in milliseconds.
	LagMS int64 `json:"lag_ms"`
	// Skipped counts the missed ticks (this one and those after it, up to
	// now − grace) that did not fire.
	Skipped int `json:"skipped,omitempty"`
	// Next is the tick the chain goes on with (zero: the expression never
	// fires again).
	Next time.Time `json:"next,omitzero"`
}

// decision is what the driver does at a tick.
type decision struct {
	fire     bool
	fireTick time.Time
	outcome  string
	lag      time.Duration // of the driver's tick
	next     time.Time
	skipped  int
}

// decide is the driver's rule, a pure function of the schedule, its tick
// and the time the driver reached it. A tick is missed when it is reached
// more than the grace after it:
//
//   - tick within the grace: it fires, on time, and the chain goes on
//     with the tick after it (due already or not: a due one is within the
//     grace too, so its driver runs at once and fires it on time);
//   - tick missed: so are all the ticks up to now − grace. Under
//     CatchUpOnce the latest of them fires, late, standing for all; under
//     CatchUpSkip none does. The chain goes on with the first tick not
//     missed. The missed ticks that did not fire are counted skipped.
//
// Firing the latest missed tick rather than the first (as Kubernetes
// CronJobs do) also keeps catch-up from firing twice when a crash forked
// the chain (a driver that submitted its successor and died before its
// commit runs again and submits another): forks that are late together
// fire the same latest tick, whose id is the same.
func decide(s *Schedule, sched cron.Schedule, loc *time.Location, tick, now time.Time, grace time.Duration) decision {
	d := decision{lag: now.Sub(tick)}
	cutoff := now.Add(-grace) // ticks before it are missed
	if !tick.Before(cutoff) {
		d.fire, d.fireTick, d.outcome = true, tick, OutcomeOnTime
		d.next = next(sched, loc, tick)
		return d
	}
	d.next = next(sched, loc, cutoff.Add(-time.Nanosecond))
	latest, missed := tick, 1
	for t := next(sched, loc, tick); !t.IsZero() && t.Before(d.next) && missed < maxCounted; t = next(sched, loc, t) {
		latest = t
		missed++
	}
	d.outcome, d.skipped = OutcomeSkipped, missed
	if s.CatchUp == CatchUpOnce {
		d.fire, d.fireTick, d.outcome, d.skipped = true, latest, OutcomeLate, missed-1
	}
	return d
}

// drive is the DriverType handler: one tick of one schedule. Every step
// is idempotent, so a run repeated after a crash before its commit does
// what the first did and no more: the fired task and the next driver task
// have ids derived from (schedule, generation, tick), and Submit returns
// an existing task rather than making a second.
func (c *Client) drive(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	var in driverInput
	if err := json.Unmarshal(t.Input, &in); err != nil || in.Tick.IsZero() || in.Generation <= 0 {
		return nil, entity.Permanent(fmt.Errorf("schedule driver %s: input %s is not {generation, tick}", t.Ref(), abbrev(string(t.Input), 80)))
	}
	name := t.Entity
	if want := c.shardOf(name); t.Shard != want {
		return nil, entity.Permanent(fmt.Errorf("schedule driver %s: schedule %q belongs to shard %s of this driver's client (group %q, %d shards): the runner's schedule client is for another group",
			t.Ref(), name, want, c.group, c.shards))
	}
	s, _, err := c.load(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return result(Result{Stopped: "deleted"})
	case errors.Is(err, ErrCorrupt):
		return nil, entity.Permanent(err)
	case err != nil:
		return nil, err
	case s.Generation != in.Generation:
		return result(Result{Stopped: "replaced"})
	case s.Paused:
		return result(Result{Stopped: "paused"})
	}
	sched, loc, err := parse(s.Cron, s.TZ)
	if err != nil {
		return nil, entity.Permanent(err) // check() parsed it: unreachable
	}
	now, err := c.now(ctx)
	if err != nil {
		return nil, err
	}
	d := decide(s, sched, loc, in.Tick, now, c.grace)
	res := Result{Outcome: d.outcome, LagMS: d.lag.Milliseconds(), Skipped: d.skipped, Next: d.next}
	if d.fire {
		id, err := c.fire(ctx, s, d.fireTick, d.outcome, now.Sub(d.fireTick))
		if err != nil {
			return nil, err
		}
		res.Fired = id
	}
	c.m.fires.WithLabelValues(OutcomeSkipped).Add(float64(d.skipped))
	// A late run may be this driver's second: the first ran on time,
	// wrote the ready pointer of the tick after it, and died before that
	// task's object. The pointer would head this schedule's mailbox for
	// the host's orphan wait (10s), holding the chain back, so the
	// successor an on-time run submits is submitted again: its object
	// appears and its driver, late too, goes on to the same tick as this
	// one (the chains meet on the first tick both reach; ids are derived
	// from the tick).
	if succ := next(sched, loc, in.Tick); !succ.IsZero() && !succ.Equal(d.next) {
		if err := c.submitDriver(ctx, s, succ); err != nil {
			return nil, fmt.Errorf("schedule %s: re-submitting tick %s: %w", name, succ.Format(time.RFC3339), err)
		}
	}
	if !d.next.IsZero() {
		if err := c.submitDriver(ctx, s, d.next); err != nil {
			return nil, fmt.Errorf("schedule %s: scheduling tick %s: %w", name, d.next.Format(time.RFC3339), err)
		}
	}
	if d.outcome != OutcomeOnTime || d.skipped > 0 {
		c.log.Info("schedule: tick missed", "schedule", name, "tick", in.Tick, "lag", d.lag, "outcome", d.outcome,
			"fired", res.Fired, "skipped", d.skipped, "catch_up", s.CatchUp, "next", d.next)
	}
	return result(res)
}

// fire submits the task of s for tick, lag after it, and returns its id. A task the
// cluster refuses for good (its input over a lowered limit, the id taken
// by another task) loses this tick only: it is logged and counted
// skipped, and the chain goes on.
func (c *Client) fire(ctx context.Context, s *Schedule, tick time.Time, outcome string, lag time.Duration) (string, error) {
	id := TaskID(s.Name, s.Generation, tick)
	_, created, err := c.tasks.Submit(ctx, task.SubmitRequest{ID: id, Type: s.Type, Entity: s.Entity, Input: s.Input})
	if errors.Is(err, task.ErrInvalid) || errors.Is(err, task.ErrInputTooLarge) || errors.Is(err, task.ErrConflict) {
		c.log.Error("schedule: tick not fired: the task was refused", "schedule", s.Name, "tick", tick, "task", id, "err", err)
		c.m.fires.WithLabelValues(OutcomeSkipped).Inc()
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("schedule %s: firing tick %s (task %s): %w", s.Name, tick.Format(time.RFC3339), id, err)
	}
	if created { // a repeated run counts nothing twice
		c.m.fires.WithLabelValues(outcome).Inc()
		c.m.lag.Observe(lag.Seconds())
	}
	return id, nil
}

func result(r Result) (json.RawMessage, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return b, nil
}
