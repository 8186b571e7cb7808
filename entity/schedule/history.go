package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// HistoryRuns is how many of a schedule's latest driver runs History
// reads: enough to show a failover's skipped ticks after it, few enough
// that a view of many schedules reads them in one go.
const HistoryRuns = 20

// historyMaxWindow bounds how far back History lists driver tasks: the
// cluster's default task retention, past which they are purged anyway.
const historyMaxWindow = 7 * 24 * time.Hour

// historyCacheSize bounds the finished driver runs a Client keeps in
// memory; the cache starts again empty when it is full.
const historyCacheSize = 10_000

// History is what a schedule's latest ticks became, read from its driver
// tasks (one per tick its chain reached, in the schedule's shard). It is
// read, never stored: one LIST of the driver tasks, then a GET of each of
// the runs that the Client has not seen finished before.
type History struct {
	// Now is the S3 time the history was read at.
	Now time.Time `json:"now"`
	// Since is the tick of the oldest run read (zero when there is none).
	Since time.Time `json:"since,omitzero"`
	// Runs are the latest runs, at most HistoryRuns, whose tick is at or
	// before Now, oldest first.
	Runs []Run `json:"runs"`
	// Missed counts the ticks that did not fire, as the runs recorded
	// them: late ticks skipped (CatchUpSkip, CatchUpOnce) and ticks older
	// than the catch-up window (CatchUpAll).
	Missed int `json:"missed"`
	// Late counts the runs that reached their tick after the grace.
	Late int `json:"late"`
	// Pending is the tick of the chain's driver that has not finished yet:
	// the latest run's when it has not, else the next tick's (zero when
	// there is none: a paused, deleted or finished schedule, or a chain
	// that stopped).
	Pending time.Time `json:"pending,omitzero"`
	// Behind is how long after the grace the chain's next driver is
	// still waiting to run (a failover or a cluster down): 0 when on time.
	Behind time.Duration `json:"behind,omitempty"`
	// Stopped says why the chain does not go on, when it does not: the
	// schedule's own reason (paused, deleted, replaced), or a driver that
	// failed or was cancelled, whose ticks after it will not fire until
	// the schedule is resumed.
	Stopped string `json:"stopped,omitempty"`
}

// Run is one driver run: one tick the chain reached.
type Run struct {
	// Tick is the tick the driver was for.
	Tick time.Time `json:"tick"`
	// Driver is the driver task's ref.
	Driver string `json:"driver"`
	// Status is the driver task's.
	Status task.Status `json:"status"`
	// Result is what the run did, once it completed.
	Result *Result `json:"result,omitempty"`
	// Error is the driver's last error, when it failed.
	Error string `json:"error,omitempty"`
}

// Last returns the latest run, nil when there is none.
func (h *History) Last() *Run {
	if len(h.Runs) == 0 {
		return nil
	}
	return &h.Runs[len(h.Runs)-1]
}

// runCache keeps the driver runs that will not change any more (completed
// ones: a completed task is never replayed), so that a view refreshed every
// few seconds reads only the runs it has not seen.
type runCache struct {
	mu   sync.Mutex
	runs map[string]Run
}

func (c *runCache) get(ref string) (Run, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.runs[ref]
	return r, ok
}

func (c *runCache) put(r Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil || len(c.runs) >= historyCacheSize {
		c.runs = make(map[string]Run)
	}
	c.runs[r.Driver] = r
}

// History reads what s's latest ticks became: its latest HistoryRuns
// driver runs at or before now (S3 time), what they fired, skipped and
// missed, whether the chain's next driver is waiting late, and whether the
// chain has stopped. A schedule whose drivers were purged (older than the
// task retention) has fewer runs.
func (c *Client) History(ctx context.Context, s *Schedule) (*History, error) {
	sched, loc, err := parse(s.Cron, s.TZ)
	if err != nil {
		return nil, &CorruptError{Key: Key(s.Shard, s.Name), Err: err}
	}
	now, err := c.now(ctx)
	if err != nil {
		return nil, err
	}
	h := &History{Now: now, Runs: []Run{}}
	ticks, later, err := c.driverTicks(ctx, s, sched, loc, now)
	if err != nil {
		return nil, err
	}
	for _, tick := range ticks {
		r, ok, err := c.run(ctx, s, tick)
		if err != nil {
			return nil, err
		}
		if ok {
			h.Runs = append(h.Runs, r)
		}
	}
	if len(h.Runs) > 0 {
		h.Since = h.Runs[0].Tick
	}
	for _, r := range h.Runs {
		if r.Result == nil {
			continue
		}
		h.Missed += r.Result.Skipped + r.Result.Missed
		if r.Result.Outcome == OutcomeLate || r.Result.Outcome == OutcomeSkipped || r.Result.Outcome == OutcomeMissed {
			h.Late++
		}
	}
	// The chain's waiting driver is the latest run's when it has not
	// finished, else the first one after now that an operator did not
	// cancel (a resume passes over those).
	last, stop := h.Last(), h.Last()
	if last != nil && !last.Status.IsTerminal() {
		h.Pending = last.Tick
	}
	for _, tick := range later {
		if !h.Pending.IsZero() {
			break
		}
		r, ok, err := c.run(ctx, s, tick)
		switch {
		case err != nil:
			return nil, err
		case ok && !r.Status.IsTerminal():
			h.Pending = tick
		case ok:
			stop = &r
		}
	}
	switch {
	case s.Paused:
		// A driver still pending ends the chain when it runs.
		h.Stopped = "paused"
	case !h.Pending.IsZero():
		h.Behind = max(now.Sub(h.Pending)-c.grace, 0)
	case stop != nil && stop.Result != nil && stop.Result.Stopped != "":
		h.Stopped = stop.Result.Stopped
	case stop != nil && (stop.Status == task.Failed || stop.Status == task.Cancelled):
		h.Stopped = fmt.Sprintf("the driver of tick %s %s, and no driver waits for a later tick: resuming the schedule (tenure schedule resume) submits the next",
			stop.Tick.Format(time.RFC3339), stop.Status)
	case s.Next(now).IsZero():
		h.Stopped = "finished: the expression has no tick after now"
	default:
		h.Stopped = "no driver task waits for the next tick (" + s.Next(now).Format(time.RFC3339) + "): resuming the schedule (tenure schedule resume) submits it"
	}
	return h, nil
}

// driverTicks lists s's driver tasks and returns the ticks of the latest
// HistoryRuns at or before now and of the first resumeTries+1 after now,
// oldest first. It lists from a window of 25 of the
// expression's periods back, widened fourfold up to three times when that
// holds fewer runs, never past historyMaxWindow.
func (c *Client) driverTicks(ctx context.Context, s *Schedule, sched cron.Schedule, loc *time.Location, now time.Time) (ticks, later []time.Time, _ error) {
	shard := c.shardOf(s.Name)
	id := DriverID(s.Name, s.Generation, now)
	prefix := task.TaskPrefix(shard) + id[:strings.LastIndexByte(id, '-')+1]
	created := time.Unix(0, s.Generation)
	window := 25 * period(s, sched, loc, now)
	for try := 0; ; try++ {
		window = min(max(window, time.Minute), historyMaxWindow)
		from := now.Add(-window)
		ticks, later = nil, nil
		after := prefix + strconv.FormatInt(from.Unix(), 10)
		for {
			page, err := c.obj.List(ctx, prefix, storage.ListOptions{StartAfter: after})
			if err != nil {
				return nil, nil, fmt.Errorf("schedule %s: listing its driver tasks (%s): %w", s.Name, prefix, err)
			}
			for _, o := range page.Objects {
				after = o.Key
				tick, ok := driverTick(prefix, o.Key)
				switch {
				case !ok:
					// Another schedule's driver whose name extends this one's.
				case tick.After(now):
					if len(later) <= resumeTries {
						later = append(later, tick)
					}
				default:
					ticks = append(ticks, tick)
					if len(ticks) > HistoryRuns {
						ticks = ticks[1:]
					}
				}
			}
			if !page.Truncated || len(page.Objects) == 0 {
				break
			}
		}
		if len(ticks) >= HistoryRuns || try == 3 || window == historyMaxWindow || from.Before(created) {
			return ticks, later, nil
		}
		window *= 4
	}
}

// driverTick reads the tick of a driver task key: prefix, Unix seconds,
// ".json". Keys that carry anything else after the prefix belong to
// another schedule and report false.
func driverTick(prefix, key string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return time.Time{}, false
	}
	digits, ok := strings.CutSuffix(rest, ".json")
	if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(sec, 0).UTC(), true
}

// period estimates the time between s's ticks around now: the gap between
// its next two ticks (a minute when it has none).
func period(s *Schedule, sched cron.Schedule, loc *time.Location, now time.Time) time.Duration {
	t1 := s.after(sched, loc, now)
	if t1.IsZero() {
		return time.Minute
	}
	t2 := s.after(sched, loc, t1)
	if t2.IsZero() {
		return time.Minute
	}
	return t2.Sub(t1)
}

// run reads the driver run of s for tick, from the cache when it finished;
// false when its task is gone (purged since the listing).
func (c *Client) run(ctx context.Context, s *Schedule, tick time.Time) (Run, bool, error) {
	shard := c.shardOf(s.Name)
	id := DriverID(s.Name, s.Generation, tick)
	ref := task.Ref(shard, id)
	if r, ok := c.history.get(ref); ok {
		return r, true, nil
	}
	r := Run{Tick: tick, Driver: ref}
	t, _, err := c.tasks.Store().Load(ctx, shard, id)
	switch {
	case errors.Is(err, task.ErrNotFound):
		return Run{}, false, nil
	case errors.Is(err, task.ErrCorrupt):
		r.Status, r.Error = task.Failed, "its task object is corrupt: "+err.Error()
		return r, true, nil
	case err != nil:
		return Run{}, false, fmt.Errorf("schedule %s: reading driver task %s: %w", s.Name, ref, err)
	}
	r.Status, r.Error = t.Status, t.Error
	if t.Status == task.Completed {
		var res Result
		if err := json.Unmarshal(t.Result, &res); err != nil {
			r.Error = fmt.Sprintf("its result %s is not a driver result: %v", abbrev(string(t.Result), 80), err)
		} else {
			r.Result = &res
		}
		c.history.put(r)
	}
	return r, true, nil
}
