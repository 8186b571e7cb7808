package console

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/storage"
)

// maxSchedulesListed bounds the schedules GET schedules reads per group.
const maxSchedulesListed = 1000

// schedulesView is GET schedules.
type schedulesView struct {
	Schedules []scheduleRow  `json:"schedules"`
	Truncated bool           `json:"truncated"` // a group has more than maxSchedulesListed
	Errors    []string       `json:"errors"`    // groups or runners that could not be read
	Singleton []singletonRow `json:"singletons"`
}

// scheduleRow is one schedule.
type scheduleRow struct {
	Name    string  `json:"name"`
	Group   string  `json:"group"`
	Ref     string  `json:"ref"`
	Cron    string  `json:"cron"`
	TZ      string  `json:"tz"`
	Type    string  `json:"type"`
	Entity  string  `json:"entity"`
	Paused  bool    `json:"paused"`
	Next    string  `json:"next"`   // the next tick after now ("" when paused or never again)
	Last    *string `json:"last"`   // not recorded on the schedule: null
	Missed  *int    `json:"missed"` // not recorded on the schedule: null
	CatchUp string  `json:"catch_up"`
	Window  string  `json:"catch_up_window"`
	Created string  `json:"created_at"`
	Updated string  `json:"updated_at"`
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
	if a.d.Schedules == nil {
		v.Errors = append(v.Errors, "schedules: not available on this runner yet")
	} else {
		for _, g := range meta.Groups {
			rows, more, err := a.groupSchedules(ctx, g)
			if err != nil {
				v.Errors = append(v.Errors, "group "+g+": "+err.Error())
				continue
			}
			v.Truncated = v.Truncated || more
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
func (a *API) groupSchedules(ctx context.Context, g string) ([]*schedule.Schedule, bool, error) {
	sc, err := a.d.Schedules(g)
	if err != nil {
		return nil, false, err
	}
	var all []*schedule.Schedule
	cursor := ""
	for {
		page, next, err := sc.List(ctx, schedule.ListOptions{After: cursor, Limit: min(storage.MaxListLimit, maxSchedulesListed)})
		if err != nil {
			return nil, false, err
		}
		all = append(all, page...)
		if next == "" {
			return all, false, nil
		}
		if len(all) >= maxSchedulesListed {
			return all[:maxSchedulesListed], true, nil
		}
		cursor = next
	}
}
