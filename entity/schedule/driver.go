package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

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
	// Outcome is the run's: on_time, late (it fired late ticks), skipped
	// (it fired none: CatchUpSkip) or missed (every due tick was older
	// than the catch-up window: CatchUpAll).
	Outcome string `json:"outcome,omitempty"`
	// Fired is the id of the task fired ("" when none was): under
	// CatchUpAll, the first of the run's batch.
	Fired string `json:"fired,omitempty"`
	// FiredLast is the id of the last task of a batch of more than one
	// (CatchUpAll).
	FiredLast string `json:"fired_last,omitempty"`
	// FiredCount counts the ticks the run fired (submitted, whether this
	// run or an earlier one created the task).
	FiredCount int `json:"fired_count,omitempty"`
	// LagMS is how late the driver reached its tick, in milliseconds.
	LagMS int64 `json:"lag_ms"`
	// Skipped counts the late ticks (this one and those after it, up to
	// now − grace) that did not fire under CatchUpSkip or CatchUpOnce.
	Skipped int `json:"skipped,omitempty"`
	// Missed counts the ticks older than the catch-up window that did not
	// fire under CatchUpAll.
	Missed int `json:"missed,omitempty"`
	// Next is the tick the chain goes on with (zero: the expression never
	// fires again).
	Next time.Time `json:"next,omitzero"`
}

// defaultBudget is how long a driver run fires a batch when its task
// carries no claim to size it by (a third of the host's default task
// lease).
const defaultBudget = 10 * time.Second

// budget is how long a driver run may fire: a third of its task's lease,
// the period of the host's claim renewals. The claim holds while renewals
// succeed, so this is not a deadline; it keeps a run short enough that
// a crash repeats little, that a run never depends on more than a couple
// of renewals, and that it ends far within the attempt timeout.
func budget(t *task.Task) time.Duration {
	if t.Claim != nil {
		if lease := t.Claim.LeaseExpiresAt.Sub(t.Claim.ClaimedAt); lease > 0 {
			return lease / 3
		}
	}
	return defaultBudget
}

// repeated reports whether t ran before: an earlier attempt, or one a
// planned handoff gave back (Requeue does not count it), may have written
// a successor's ready pointer and stopped before its object.
func repeated(t *task.Task) bool {
	if t.Attempt > 1 || t.HistoryDropped > 0 {
		return true
	}
	claims := 0
	for _, h := range t.History {
		if h.Event == task.EventClaimed || h.Event == task.EventTakenOver {
			claims++
		}
	}
	return claims > 1
}

// drive is the DriverType handler: one tick of one schedule, or under
// CatchUpAll one batch of late ticks from it, fired in tick order. Every
// step is idempotent, so a run repeated after a crash before its commit
// does what the first did and no more: the fired tasks and the next
// driver task have ids derived from (schedule, generation, tick), and
// Submit returns an existing task rather than making a second.
func (c *Client) drive(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	start := time.Now()
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
	read := time.Now() // S3 time now + time.Since(read) is the S3 time of a fire
	d := decide(s, sched, loc, in.Tick, now, c.grace, MaxBatch)
	res := Result{Outcome: d.outcome, LagMS: d.lag.Milliseconds(), Skipped: d.skipped, Missed: d.missed, Next: d.next}
	limit := budget(t)
	for i, f := range d.fires {
		if i > 0 && time.Since(start) > limit {
			// The rest of the batch is the next driver's, due at once.
			res.Next = f.tick
			break
		}
		id, err := c.fire(ctx, s, f.tick, f.outcome, now.Add(time.Since(read)).Sub(f.tick))
		if err != nil {
			return nil, err
		}
		switch {
		case id == "":
		case res.Fired == "":
			res.Fired = id
		default:
			res.FiredLast = id
		}
		if id != "" {
			res.FiredCount++
		}
	}
	c.m.fires.WithLabelValues(OutcomeSkipped).Add(float64(d.skipped))
	c.m.fires.WithLabelValues(OutcomeMissed).Add(float64(d.missed))
	// A repeated run may follow one that wrote the ready pointer of its
	// successor and died before that task's object. The pointer would head
	// this schedule's mailbox for the host's orphan wait (10s), holding
	// the chain back, so the successor an on-time run submits is
	// submitted again: its object appears and its driver, late too, goes
	// on with this one (the chains meet on the first driver id both
	// submit; see decide). Only a repeated run does it: under CatchUpAll
	// every driver of a catch-up is late, and each re-submitting its
	// successor would have every driver of the batch fire the rest of it.
	if succ := next(sched, loc, in.Tick); repeated(t) && !succ.IsZero() && !succ.Equal(res.Next) {
		if err := c.submitDriver(ctx, s, succ); err != nil {
			return nil, fmt.Errorf("schedule %s: re-submitting tick %s: %w", name, succ.Format(time.RFC3339), err)
		}
	}
	if !res.Next.IsZero() {
		if err := c.submitDriver(ctx, s, res.Next); err != nil {
			return nil, fmt.Errorf("schedule %s: scheduling tick %s: %w", name, res.Next.Format(time.RFC3339), err)
		}
	}
	c.logRun(s, in.Tick, d, res)
	return result(res)
}

// logRun logs a run that did not just fire its tick on time.
func (c *Client) logRun(s *Schedule, tick time.Time, d decision, res Result) {
	if d.missed > 0 {
		c.log.Warn("schedule: ticks missed: older than the catch-up window when the driver reached them", "schedule", s.Name,
			"tick", tick, "lag", d.lag, "missed", d.missed, "window", s.CatchUpWindow.Std(), "fired", res.FiredCount, "next", res.Next)
	}
	switch {
	case s.CatchUp == CatchUpAll && d.outcome == OutcomeLate:
		c.log.Info("schedule: catching up", "schedule", s.Name, "tick", tick, "lag", d.lag, "fired", res.FiredCount,
			"first", res.Fired, "last", res.FiredLast, "next", res.Next)
	case s.CatchUp != CatchUpAll && (d.outcome != OutcomeOnTime || d.skipped > 0):
		c.log.Info("schedule: tick missed", "schedule", s.Name, "tick", tick, "lag", d.lag, "outcome", d.outcome,
			"fired", res.Fired, "skipped", d.skipped, "catch_up", s.CatchUp, "next", res.Next)
	}
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
