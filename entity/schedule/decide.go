package schedule

import (
	"time"

	"github.com/robfig/cron/v3"
)

// maxCounted bounds the due ticks one driver run walks to count them, so
// that a cluster back after a long outage of an every-second schedule
// does not spin (the count, and under CatchUpOnce the tick fired, then
// stop there; @every schedules are counted by arithmetic, exactly).
const maxCounted = 100_000

// MaxBatch bounds the ticks one driver run fires when it catches up under
// CatchUpAll. A batch also ends at the next multiple of MaxBatch seconds
// (Unix time), so that two forks of a chain end their batches on the same
// tick and meet there; ticks are whole seconds, so such a span holds at
// most MaxBatch of them. The driver ends a batch earlier when it has run
// for a third of its task lease (see drive). Either way the next driver,
// due already, runs as soon as this one completes.
const MaxBatch = 256

// fire is a tick a driver run fires, and its outcome label.
type fire struct {
	tick    time.Time
	outcome string
}

// decision is what the driver does at a tick.
type decision struct {
	fires   []fire        // in tick order
	outcome string        // the run's: on_time, late, skipped or missed
	lag     time.Duration // of the driver's tick
	next    time.Time     // the tick the chain goes on with (zero: none)
	skipped int           // late ticks not fired (skip, once)
	missed  int           // ticks older than the window (all)
}

// decide is the driver's rule, a pure function of the schedule, its tick,
// the time the driver reached it, the grace and the batch bound. A tick is
// late when it is reached more than the grace after it:
//
//   - tick within the grace: it fires, on time, and the chain goes on
//     with the tick after it (due already or not: a due one is within the
//     grace too, so its driver runs at once and fires it on time);
//   - tick late, CatchUpAll: the due ticks from it on fire in tick order,
//     late (on time for those within the grace), a batch of at most batch
//     ticks up to the next multiple of batch seconds; the chain goes on
//     with the first tick not fired, whose driver is due at once while
//     the chain is behind. Ticks older than the window (and never fewer
//     than the grace) are missed: counted, not fired;
//   - tick late, other policies: so are all the ticks up to now − grace.
//     Under CatchUpOnce the latest of them fires, late, standing for all;
//     under CatchUpSkip none does. The chain goes on with the first tick
//     not late. The late ticks that did not fire are counted skipped.
//
// Forks: a driver run repeated after a crash before its commit (or a
// takeover) decides again, at a later now. Whatever it fires again has
// the ids the first run's fires had, so nothing fires twice; what it may
// change is the tick the chain goes on with, and then two chains run
// until they meet on a driver id. Firing the latest late tick under
// CatchUpOnce rather than the first (as Kubernetes CronJobs do) keeps
// forks that are late together on the same fire and the same next tick.
// Under CatchUpAll forks behind together end their batches at the same
// multiple of batch seconds, where they meet (forks that caught up meet
// on the first tick both reach: on time, a chain walks every tick), so a
// fork costs at most one batch of submits that create nothing.
func decide(s *Schedule, sched cron.Schedule, loc *time.Location, tick, now time.Time, grace time.Duration, batch int) decision {
	d := decision{lag: now.Sub(tick)}
	cutoff := now.Add(-grace) // ticks before it are late
	if !tick.Before(cutoff) {
		d.fires, d.outcome = []fire{{tick, OutcomeOnTime}}, OutcomeOnTime
		d.next = next(sched, loc, tick)
		return d
	}
	if s.CatchUp == CatchUpAll {
		return catchUp(d, sched, loc, tick, now, cutoff, max(s.CatchUpWindow.Std(), grace), batch)
	}
	d.next = s.after(sched, loc, cutoff.Add(-time.Nanosecond))
	latest, late := tick, 1
	for t := next(sched, loc, tick); !t.IsZero() && t.Before(d.next) && late < maxCounted; t = next(sched, loc, t) {
		latest = t
		late++
	}
	d.outcome, d.skipped = OutcomeSkipped, late
	if s.CatchUp == CatchUpOnce {
		d.fires, d.outcome, d.skipped = []fire{{latest, OutcomeLate}}, OutcomeLate, late-1
	}
	return d
}

// catchUp is decide's rule for a late tick under CatchUpAll.
func catchUp(d decision, sched cron.Schedule, loc *time.Location, tick, now, cutoff time.Time, window time.Duration, batch int) decision {
	batch = max(batch, 1)
	start, missed := seek(sched, loc, tick, now.Add(-window))
	d.missed = missed
	end := alignUp(start, batch)
	t := start
	for ; !t.IsZero() && !t.After(now) && t.Before(end) && len(d.fires) < batch; t = next(sched, loc, t) {
		outcome := OutcomeLate
		if !t.Before(cutoff) {
			outcome = OutcomeOnTime
		}
		d.fires = append(d.fires, fire{t, outcome})
	}
	d.next = t
	switch {
	case len(d.fires) == 0:
		// Every tick from the driver's to now was older than the window.
		d.outcome = OutcomeMissed
	case d.fires[0].outcome == OutcomeLate:
		d.outcome = OutcomeLate
	default:
		d.outcome = OutcomeOnTime
	}
	return d
}

// seek returns the first tick of the chain through from (a tick) that is
// not before x, and how many of its ticks it passed. An @every schedule
// is walked by arithmetic, so that the tick found is on the chain's own
// grid however far x is (next from any other time would start another
// grid, whose ids a fork of the chain would not share); a calendar one
// is walked tick by tick up to maxCounted, then jumps (its ticks are the
// calendar's, whatever the start).
func seek(sched cron.Schedule, loc *time.Location, from, x time.Time) (time.Time, int) {
	if !from.Before(x) {
		return from, 0
	}
	if cd, ok := sched.(cron.ConstantDelaySchedule); ok && cd.Delay >= time.Second {
		k := (x.Sub(from) + cd.Delay - 1) / cd.Delay
		return from.Add(k * cd.Delay), int(k)
	}
	n := 0
	t := from
	for ; !t.IsZero() && t.Before(x); t = next(sched, loc, t) {
		if n == maxCounted {
			return next(sched, loc, x.Add(-time.Nanosecond)), n
		}
		n++
	}
	return t, n
}

// alignUp returns the first multiple of batch seconds (Unix time) after t.
func alignUp(t time.Time, batch int) time.Time {
	b := int64(batch)
	sec := t.Unix()
	q := sec / b
	if sec%b < 0 {
		q-- // floor, for times before 1970
	}
	return time.Unix((q+1)*b, 0).UTC()
}
