package console

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/storage"
)

// maxSchedulesListed bounds the schedules GET schedules reads per group.
const maxSchedulesListed = 1000

// Bounds of the schedule histories GET schedules reads (see
// schedule.Client.History: a LIST of a schedule's driver tasks and a GET
// of its waiting driver, plus one per run finished since the last read).
const (
	// maxHistories bounds the schedules whose history one GET reads:
	// those after it are listed without (history_error says so).
	maxHistories = 100
	// historyReads bounds the histories read at once.
	historyReads = 8
	// historyReuse is how long a history read is shown again instead of
	// read anew, so that a page refreshing every 2 s costs each schedule
	// one LIST per historyReuse.
	historyReuse = 5 * time.Second
	// historyBudget bounds the histories of one GET: a slow object store
	// leaves rows without a history (history_error says so) rather than
	// spending the view's whole ViewTimeout, which the singletons' runner
	// statuses need too.
	historyBudget = ViewTimeout / 2
)

// schedulesView is GET schedules.
type schedulesView struct {
	Schedules []scheduleRow  `json:"schedules"`
	Truncated bool           `json:"truncated"` // a group has more than maxSchedulesListed
	Errors    []string       `json:"errors"`    // groups or runners that could not be read
	Singleton []singletonRow `json:"singletons"`
}

// scheduleRow is one schedule.
type scheduleRow struct {
	Name    string `json:"name"`
	Group   string `json:"group"`
	Ref     string `json:"ref"`
	Cron    string `json:"cron"`
	TZ      string `json:"tz"`
	Type    string `json:"type"`
	Entity  string `json:"entity"`
	Paused  bool   `json:"paused"`
	Next    string `json:"next"` // the next tick after now ("" when paused or never again)
	CatchUp string `json:"catch_up"`
	Window  string `json:"catch_up_window"`
	Created string `json:"created_at"`
	Updated string `json:"updated_at"`

	// What the latest ticks became, from the schedule's driver tasks
	// (schedule.History); null or empty when the history was not read
	// (HistoryError says why).
	Last     *schedule.Run `json:"last"`      // the latest tick the chain reached
	Missed   *int          `json:"missed"`    // ticks not fired (skipped, or older than the catch-up window) in the runs read
	Late     *int          `json:"late"`      // runs that reached their tick after the grace
	RunsRead int           `json:"runs_read"` // the runs read: the latest schedule.HistoryRuns
	Since    string        `json:"since"`     // the tick of the oldest run read
	Waiting  string        `json:"waiting"`   // the tick of the chain's driver not finished yet
	BehindMS int64         `json:"behind_ms"` // how long past the grace that driver waits
	Stopped  string        `json:"stopped"`   // why the chain does not go on, when it does not
	HistErr  string        `json:"history_error,omitempty"`
}

// historyCache keeps the histories read lately, by schedule ref.
type historyCache struct {
	mu   sync.Mutex
	read map[string]historyRead
}

type historyRead struct {
	h  *schedule.History
	at time.Time
}

func (c *historyCache) get(ref string, now time.Time) *schedule.History {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.read[ref]; ok && now.Sub(r.at) < historyReuse {
		return r.h
	}
	return nil
}

func (c *historyCache) put(ref string, h *schedule.History, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.read == nil || len(c.read) >= 4*maxHistories {
		c.read = make(map[string]historyRead)
	}
	c.read[ref] = historyRead{h, now}
}

// singletonRow is one singleton, as the runner running it reports it.
type singletonRow struct {
	Type     string `json:"type"`
	Runner   string `json:"runner"`
	Shard    string `json:"shard"`
	Epoch    int64  `json:"epoch"`
	Running  bool   `json:"running"`
	Since    string `json:"since"`
	Restarts int    `json:"restarts"`
}

func (a *API) schedules(ctx context.Context, w http.ResponseWriter, _ *http.Request) error {
	meta, err := a.meta(ctx)
	if err != nil {
		return err
	}
	v := schedulesView{Schedules: []scheduleRow{}, Errors: []string{}, Singleton: []singletonRow{}}
	now := a.d.Now()
	budget := maxHistories // the histories left to read
	if a.d.Schedules == nil {
		v.Errors = append(v.Errors, "schedules: not available on this runner yet")
	} else {
		for _, g := range meta.Groups {
			sc, rows, more, err := a.groupSchedules(ctx, g)
			if err != nil {
				v.Errors = append(v.Errors, "group "+g+": "+err.Error())
				continue
			}
			v.Truncated = v.Truncated || more
			first := len(v.Schedules)
			for _, s := range rows {
				row := scheduleRow{Name: s.Name, Group: g, Ref: s.Ref(), Cron: s.Cron, TZ: s.TZ, Type: s.Type, Entity: s.Entity,
					Paused: s.Paused, CatchUp: string(s.CatchUp), Created: utc(s.CreatedAt), Updated: utc(s.UpdatedAt)}
				if row.TZ == "" {
					row.TZ = "UTC"
				}
				if s.CatchUp == schedule.CatchUpAll {
					row.Window = s.CatchUpWindow.Std().String()
				}
				if !s.Paused {
					row.Next = utc(s.Next(now))
				}
				v.Schedules = append(v.Schedules, row)
			}
			a.histories(ctx, sc, rows, v.Schedules[first:], now, &budget)
		}
	}
	runners, _, err := a.d.Store.Runners(ctx)
	if err != nil && len(runners) == 0 {
		return unavailable("listing the runners in etcd", err)
	}
	sortRunners(runners)
	sts, errs := statuses(ctx, a.d.Peers, runners)
	for i, r := range runners {
		if errs[i] != nil {
			v.Errors = append(v.Errors, "runner "+r.ID+": "+errs[i].Error())
			continue
		}
		for _, s := range sts[i].Singletons {
			v.Singleton = append(v.Singleton, singletonRow{Type: s.Type, Runner: r.ID, Shard: s.Shard, Epoch: s.Epoch,
				Running: s.Running, Since: utc(s.Since), Restarts: s.Restarts})
		}
	}
	slices.SortFunc(v.Singleton, func(x, y singletonRow) int {
		return cmp.Or(strings.Compare(x.Type, y.Type), strings.Compare(x.Runner, y.Runner))
	})
	writeJSON(w, http.StatusOK, v)
	return nil
}

// groupSchedules reads up to maxSchedulesListed schedules of group g.
func (a *API) groupSchedules(ctx context.Context, g string) (Schedules, []*schedule.Schedule, bool, error) {
	sc, err := a.d.Schedules(g)
	if err != nil {
		return nil, nil, false, err
	}
	var all []*schedule.Schedule
	cursor := ""
	for {
		page, next, err := sc.List(ctx, schedule.ListOptions{After: cursor, Limit: min(storage.MaxListLimit, maxSchedulesListed)})
		if err != nil {
			return nil, nil, false, err
		}
		all = append(all, page...)
		if next == "" {
			return sc, all, false, nil
		}
		if len(all) >= maxSchedulesListed {
			return sc, all[:maxSchedulesListed], true, nil
		}
		cursor = next
	}
}

// histories fills rows (those of scheds, in order) with what their
// latest ticks became: the first maxHistories schedules of the view,
// historyReads at a time, each reused for historyReuse. budget counts the
// histories the view may still read.
func (a *API) histories(ctx context.Context, sc Schedules, scheds []*schedule.Schedule, rows []scheduleRow, now time.Time, budget *int) {
	ctx, cancel := context.WithTimeout(ctx, historyBudget)
	defer cancel()
	sem := make(chan struct{}, historyReads)
	var wg sync.WaitGroup
	for i, s := range scheds {
		row := &rows[i]
		if *budget == 0 {
			row.HistErr = "not read: the view reads the histories of its first " + strconv.Itoa(maxHistories) + " schedules"
			continue
		}
		*budget--
		if h := a.hist.get(row.Ref, now); h != nil {
			fillHistory(row, h)
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			h, err := sc.History(ctx, s)
			if err != nil {
				row.HistErr = err.Error()
				if ctx.Err() != nil {
					row.HistErr = "not read within " + historyBudget.String() + ": " + row.HistErr
				}
				a.d.Logger.Warn("console: reading a schedule's history", "schedule", row.Ref, "err", err)
				return
			}
			a.hist.put(row.Ref, h, now)
			fillHistory(row, h)
		})
	}
	wg.Wait()
}

// fillHistory copies h into row.
func fillHistory(row *scheduleRow, h *schedule.History) {
	missed, late := h.Missed, h.Late
	row.Last, row.Missed, row.Late, row.RunsRead = h.Last(), &missed, &late, len(h.Runs)
	row.Since, row.Waiting, row.BehindMS, row.Stopped = utc(h.Since), utc(h.Pending), h.Behind.Milliseconds(), h.Stopped
}
