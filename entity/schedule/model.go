package schedule

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// CatchUp says what a schedule does with ticks its driver reaches later
// than the grace (a failover, a cluster that was down).
type CatchUp string

const (
	// CatchUpAll (the default) fires every tick that is at most the
	// schedule's CatchUpWindow old when its driver reaches it, late, in
	// tick order, in batches of at most MaxBatch ticks per driver run.
	// Ticks older than the window are missed: counted and logged, not
	// fired.
	CatchUpAll CatchUp = "all"
	// CatchUpSkip fires no late tick: the schedule goes on with the first
	// tick within the grace. It was the default of schedules created
	// before CatchUpAll existed, which keep it.
	CatchUpSkip CatchUp = "skip"
	// CatchUpOnce fires the latest late tick once, late, standing for all
	// the ticks missed, then goes on with the first tick within the grace.
	CatchUpOnce CatchUp = "once"
)

// Valid reports whether c is a catch-up policy.
func (c CatchUp) Valid() bool { return c == CatchUpAll || c == CatchUpSkip || c == CatchUpOnce }

// Bounds of a CatchUpAll schedule's window.
const (
	// DefaultCatchUpWindow is the window of a CatchUpAll schedule created
	// without one, and of one stored without one.
	DefaultCatchUpWindow = time.Hour
	// MinCatchUpWindow is the shortest window. A window shorter than the
	// driver's grace acts as the grace: a tick within the grace is never
	// missed.
	MinCatchUpWindow = time.Second
	// MaxCatchUpWindow is the longest window: 7 days, the cluster's
	// default task retention. A repeated driver run that fires a tick
	// again finds the tick's task only while the task is kept: a window
	// longer than the retention could fire a tick whose task was purged
	// a second time.
	MaxCatchUpWindow = 7 * 24 * time.Hour
)

// parser accepts 5 fields, an optional leading seconds field (6 fields),
// and descriptors (@hourly, @every 1s).
//
// It stays robfig/cron v3, unmaintained since 2020, on purpose: a tick's
// time names its tasks (cron-NAME-GENERATION-UNIX), so a parser whose Next
// differs fires other ticks for the schedules already stored, and runners
// of two versions, during a rolling upgrade, would fire both. The
// maintained fork with this API, netresearch/go-cron (v0.9.1), changes
// Next on purpose: "30 2 * * *" in Europe/Paris fires at 03:30 on the day
// the clocks skip 02:00-03:00, where robfig does not fire; day-of-month
// and day-of-week are ANDed, not ORed; "*/90" is refused. adhocore/gronx
// has no @every and guesses whether a 6th field is seconds or a year;
// hashicorp/cronexpr reads a 6th field as the year and has no @every.
// What robfig does here (Parse, then Next of SpecSchedule and
// ConstantDelaySchedule) is small and settled, and its known panics (TZ=
// prefixes) are refused or recovered by parse.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec describes a schedule to create.
type Spec struct {
	// Name identifies the schedule in its shard group: the rule of task ids
	// (task.ValidateID). Required.
	Name string
	// Cron is the expression: 5 fields (minute hour dom month dow), 6 with
	// leading seconds, or a descriptor (@hourly, @daily, @every 30s).
	// Required.
	Cron string
	// TZ is the IANA zone the expression is read in (time.LoadLocation);
	// empty means UTC.
	TZ string
	// Type, Entity and Input are those of the task fired at each tick (see
	// task.SubmitRequest). Type is required.
	Type   string
	Entity string
	Input  json.RawMessage
	// CatchUp defaults to CatchUpAll.
	CatchUp CatchUp
	// CatchUpWindow is how old a late tick may be and still fire under
	// CatchUpAll: zero means DefaultCatchUpWindow; at least
	// MinCatchUpWindow, at most MaxCatchUpWindow. The other policies take
	// none.
	CatchUpWindow time.Duration
}

// Schedule is a stored schedule: the object at Key(shard, name).
type Schedule struct {
	Name    string          `json:"name"`
	Cron    string          `json:"cron"`
	TZ      string          `json:"tz,omitempty"`
	Type    string          `json:"type"`
	Entity  string          `json:"entity,omitempty"`
	Input   json.RawMessage `json:"input,omitempty"`
	CatchUp CatchUp         `json:"catch_up"`
	// CatchUpWindow is the window of a CatchUpAll schedule (see
	// Spec.CatchUpWindow); absent for the other policies. One stored
	// without it reads as DefaultCatchUpWindow.
	CatchUpWindow task.Duration `json:"catch_up_window,omitempty"`
	Paused        bool          `json:"paused"`
	// Generation tells this schedule from an earlier one of the same name
	// that was deleted: it is the creation time in Unix nanoseconds (S3
	// time), so no tombstone has to outlive a delete. Driver and fired task
	// ids carry it, so an old chain stops and never collides with a new one.
	Generation int64     `json:"generation"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	// Rev counts the writes of this generation (1 at create); every write
	// changes it, so the object's ETag changes too.
	Rev int64 `json:"rev"`
	// Shard is where the schedule lives: the shard of its driver entity.
	Shard storage.ShardID `json:"-"`
}

// Ref returns "group/index/name".
func (s *Schedule) Ref() string { return s.Shard.String() + "/" + s.Name }

// Next returns the schedule's first tick strictly after t, or the zero
// time when its expression never fires again (or does not parse: a stored
// schedule was checked at create).
func (s *Schedule) Next(t time.Time) time.Time {
	sched, loc, err := parse(s.Cron, s.TZ)
	if err != nil {
		return time.Time{}
	}
	return s.after(sched, loc, t)
}

// after is the schedule's first tick strictly after t. The ticks of an
// @every schedule lie on its generation's grid: its first tick (the
// creation time to the second, plus the delay) plus multiples of the
// delay. Counting the delay from t instead would start another grid
// wherever t is not a tick (a resume, a chain going on after late ticks):
// a second chain of the schedule, pending beside the first (a resume
// before the paused chain's next tick, a fork), would never meet it, and
// both would fire. Calendar ticks are the calendar's whatever t is.
func (s *Schedule) after(sched cron.Schedule, loc *time.Location, t time.Time) time.Time {
	cd, ok := sched.(cron.ConstantDelaySchedule)
	if !ok || cd.Delay < time.Second {
		return next(sched, loc, t)
	}
	origin := next(sched, loc, time.Unix(0, s.Generation))
	if t.Before(origin) {
		return origin
	}
	return origin.Add((t.Sub(origin)/cd.Delay + 1) * cd.Delay)
}

// next is sched's first tick after t, read in loc, in UTC. Ticks are whole
// seconds (the finest cron field) so that ids derived from their Unix
// seconds are exact.
func next(sched cron.Schedule, loc *time.Location, t time.Time) time.Time {
	n := sched.Next(t.In(loc))
	if n.IsZero() {
		return n
	}
	return n.Truncate(time.Second).UTC()
}

// parse parses a cron expression and zone, naming the field at fault.
func parse(expr, tz string) (_ cron.Schedule, _ *time.Location, err error) {
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, nil, &ValidationError{Field: "tz", Value: strconv.Quote(tz), Rule: "is not a known IANA time zone", Err: err}
	}
	if e := strings.TrimSpace(expr); strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") {
		return nil, nil, &ValidationError{Field: "cron", Value: strconv.Quote(abbrev(expr, 60)), Rule: "give the time zone with tz, not in the expression"}
	}
	// A parser that panics on some input must not take the caller down.
	defer func() {
		if r := recover(); r != nil {
			err = &ValidationError{Field: "cron", Value: strconv.Quote(abbrev(expr, 60)), Rule: fmt.Sprint("does not parse: ", r)}
		}
	}()
	sched, err := parser.Parse(expr)
	if err != nil {
		return nil, nil, &ValidationError{Field: "cron", Value: strconv.Quote(abbrev(expr, 60)),
			Rule: "does not parse (5 fields, 6 with seconds, or @every/@hourly/@daily…): " + err.Error(), Err: err}
	}
	return sched, loc, nil
}

// validate checks a spec and fills its defaults. maxInput is the task
// store's input limit (0: unchecked).
func (sp *Spec) validate(maxInput int) error {
	if err := task.ValidateID(sp.Name); err != nil {
		return &ValidationError{Field: "name", Value: strconv.Quote(abbrev(sp.Name, 60)), Rule: "must be 1 to 256 bytes of [A-Za-z0-9_:-]", Err: err}
	}
	if _, _, err := parse(sp.Cron, sp.TZ); err != nil {
		return err
	}
	if err := task.ValidateType(sp.Type); err != nil {
		return &ValidationError{Field: "type", Value: strconv.Quote(abbrev(sp.Type, 60)), Rule: "must be 1 to 256 bytes of [A-Za-z0-9_:-]", Err: err}
	}
	if err := task.ValidateEntity(sp.Entity); err != nil {
		return &ValidationError{Field: "entity", Rule: err.Error(), Err: err}
	}
	if len(sp.Input) > 0 && !json.Valid(sp.Input) {
		return &ValidationError{Field: "input", Value: strconv.Quote(abbrev(string(sp.Input), 60)), Rule: "is not valid JSON"}
	}
	if maxInput > 0 && len(sp.Input) > maxInput {
		return &ValidationError{Field: "input", Rule: fmt.Sprintf("is %d bytes, the task input limit is %d", len(sp.Input), maxInput)}
	}
	if sp.CatchUp == "" {
		sp.CatchUp = CatchUpAll
	}
	if !sp.CatchUp.Valid() {
		return &ValidationError{Field: "catch_up", Value: strconv.Quote(abbrev(string(sp.CatchUp), 60)), Rule: `must be "all", "once" or "skip"`}
	}
	switch {
	case sp.CatchUp != CatchUpAll && sp.CatchUpWindow != 0:
		return &ValidationError{Field: "catch_up_window", Value: sp.CatchUpWindow.String(),
			Rule: fmt.Sprintf("applies to catch_up %q only (this schedule's is %q)", CatchUpAll, sp.CatchUp)}
	case sp.CatchUp != CatchUpAll:
	case sp.CatchUpWindow == 0:
		sp.CatchUpWindow = DefaultCatchUpWindow
	case sp.CatchUpWindow < MinCatchUpWindow || sp.CatchUpWindow > MaxCatchUpWindow:
		return &ValidationError{Field: "catch_up_window", Value: sp.CatchUpWindow.String(),
			Rule: fmt.Sprintf("must be between %s and %s", MinCatchUpWindow, MaxCatchUpWindow)}
	}
	return nil
}

// check validates a decoded schedule, what a stored object must hold for
// the driver to act on it, and fills the default window of a CatchUpAll
// schedule stored without one.
func (s *Schedule) check() error {
	if s.CatchUp == "" {
		// Every version wrote the policy: a schedule stored without one
		// was not written by Create, and must not become CatchUpAll.
		return &ValidationError{Field: "catch_up", Rule: "is missing"}
	}
	sp := Spec{Name: s.Name, Cron: s.Cron, TZ: s.TZ, Type: s.Type, Entity: s.Entity, Input: s.Input,
		CatchUp: s.CatchUp, CatchUpWindow: s.CatchUpWindow.Std()}
	if err := sp.validate(0); err != nil {
		return err
	}
	s.CatchUpWindow = task.Duration(sp.CatchUpWindow)
	if s.Generation <= 0 || s.Rev <= 0 {
		return &ValidationError{Field: "generation/rev", Value: fmt.Sprintf("%d/%d", s.Generation, s.Rev), Rule: "must be positive"}
	}
	return nil
}

func abbrev(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
