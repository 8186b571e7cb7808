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

// maxCounted bounds the passed-over ticks one driver run counts, so that a
// cluster back after a long outage of an every-second schedule does not
// spin.
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
	// Fired is the id of the task fired for the tick ("" when skipped).
	Fired string `json:"fired,omitempty"`
	// LagMS is how late the driver reached its tick, in milliseconds.
	LagMS int64 `json:"lag_ms"`
	// Passed counts the ticks after this one that were not driven (the
	// driver came back after them); none of them fired.
	Passed int `json:"passed,omitempty"`
	// Next is the tick the chain goes on with (zero: the expression never
	// fires again).
	Next time.Time `json:"next,omitzero"`
}

// decision is what the driver does at a tick.
type decision struct {
	fire    bool
	outcome string
	lag     time.Duration
	next    time.Time
	passed  int
}

// decide is the driver's rule, a pure function of the schedule, its tick
// and the time the driver reached it:
//
//   - within the grace: fire, on time;
//   - later (missed): CatchUpOnce fires the tick, late, standing for all
//     the ticks missed since; CatchUpSkip fires nothing;
//   - either way the chain goes on with the first tick after max(tick,
//     now); the ticks before it that no driver reached are counted
//     skipped.
func decide(s *Schedule, sched cron.Schedule, loc *time.Location, tick, now time.Time, grace time.Duration) decision {
	d := decision{lag: now.Sub(tick)}
	switch {
	case d.lag <= grace:
		d.fire, d.outcome = true, OutcomeOnTime
	case s.CatchUp == CatchUpOnce:
		d.fire, d.outcome = true, OutcomeLate
	default:
		d.outcome = OutcomeSkipped
	}
	from := tick
	if now.After(from) {
		from = now
	}
	d.next = next(sched, loc, from)
	for t := next(sched, loc, tick); !t.IsZero() && t.Before(d.next) && d.passed < maxCounted; t = next(sched, loc, t) {
		d.passed++
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
	res := Result{Outcome: d.outcome, LagMS: d.lag.Milliseconds(), Passed: d.passed, Next: d.next}
	if d.fire {
		id, err := c.fire(ctx, s, in.Tick, d)
		if err != nil {
			return nil, err
		}
		res.Fired = id
	} else {
		c.m.fires.WithLabelValues(OutcomeSkipped).Inc()
	}
	c.m.fires.WithLabelValues(OutcomeSkipped).Add(float64(d.passed))
	if !d.next.IsZero() {
		if err := c.submitDriver(ctx, s, d.next); err != nil {
			return nil, fmt.Errorf("schedule %s: scheduling tick %s: %w", name, d.next.Format(time.RFC3339), err)
		}
	}
	if d.outcome != OutcomeOnTime || d.passed > 0 {
		c.log.Info("schedule: tick missed", "schedule", name, "tick", in.Tick, "lag", d.lag, "outcome", d.outcome,
			"passed", d.passed, "catch_up", s.CatchUp, "next", d.next)
	}
	return result(res)
}

// fire submits the task of s for tick and returns its id. A task the
// cluster refuses for good (its input over a lowered limit, the id taken
// by another task) loses this tick only: it is logged and counted
// skipped, and the chain goes on.
func (c *Client) fire(ctx context.Context, s *Schedule, tick time.Time, d decision) (string, error) {
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
		c.m.fires.WithLabelValues(d.outcome).Inc()
		c.m.lag.Observe(d.lag.Seconds())
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
