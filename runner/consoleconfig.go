package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/console"
	"github.com/tenurehq/tenure/storage"
)

// consoleConfig is the console's dynamic config: the rules of `tenure
// config set` (configset.go) on the runner's etcd, checked against the
// live runners' settings as their admin endpoints report them.
type consoleConfig struct {
	r     *Runner
	parts *consoleParts // ready says when the stores are open
	peers console.Peers
}

// liveConfigRunner is a live runner as the config view sees it.
type liveConfigRunner struct {
	info   storage.RunnerInfo
	status console.RunnerStatus
	err    error // why its status is missing
	lease  *storage.LeaseTime
	lerr   error
}

// live lists the live runners with their statuses and, for those that
// did not answer, their leases.
func (c *consoleConfig) live(ctx context.Context) ([]liveConfigRunner, error) {
	if err := c.parts.ready(); err != nil {
		return nil, err
	}
	runners, _, err := c.r.rs.Runners(ctx)
	if err != nil && !errors.Is(err, storage.ErrCorrupt) {
		return nil, err
	}
	slices.SortFunc(runners, func(a, b storage.RunnerInfo) int { return strings.Compare(a.ID, b.ID) })
	out := make([]liveConfigRunner, len(runners))
	var wg sync.WaitGroup
	for i, ri := range runners {
		out[i].info = ri
		wg.Go(func() {
			out[i].status, out[i].err = c.peers.Status(ctx, ri)
			if out[i].err != nil {
				lt, err := c.r.rs.LeaseTimeToLive(ctx, ri.LeaseID)
				if err != nil {
					out[i].lerr = err
					return
				}
				out[i].lease = &lt
			}
		})
	}
	wg.Wait()
	return out, nil
}

// view builds the config view of the stored document cv and the live
// runners.
func (c *consoleConfig) view(cv storage.ConfigValue, live []liveConfigRunner) console.ConfigView {
	v := console.ConfigView{Revision: cv.Revision, Document: json.RawMessage("null"), Runners: []console.ConfigRunner{},
		Keys: slices.Clone(DynamicKeys)}
	var doc DynamicDoc
	if cv.Value != nil {
		v.Document = json.RawMessage(cv.Value)
		if !json.Valid(cv.Value) {
			b, _ := json.Marshal(string(cv.Value))
			v.Document = b
		}
		var err error
		if doc, err = ParseDynamicDoc(cv.Value); err != nil {
			v.Error = flatLine(err)
		}
		v.Version, v.RolloutPercent = doc.Version, doc.Rollout
	}
	for _, l := range live {
		_, canary := doc.For(l.info.ID)
		cr := console.ConfigRunner{ID: l.info.ID, Canary: canary, RolloutBucket: RolloutBucket(l.info.ID), Reachable: l.err == nil}
		if l.err != nil {
			cr.Error = "admin endpoint did not answer: " + l.err.Error()
		} else {
			cr.AppliedVersion, cr.Error = l.status.ConfigVersion, l.status.ConfigError
		}
		v.Runners = append(v.Runners, cr)
	}
	return v
}

// Get implements console.ConfigService.
func (c *consoleConfig) Get(ctx context.Context) (console.ConfigView, error) {
	if err := c.parts.ready(); err != nil {
		return console.ConfigView{}, err
	}
	cv, err := c.r.rs.Config(ctx)
	if err != nil {
		return console.ConfigView{}, err
	}
	live, err := c.live(ctx)
	if err != nil {
		return console.ConfigView{}, err
	}
	return c.view(cv, live), nil
}

// invalid is a change refused on its own: 400.
func invalid(err error) error {
	return console.NewError(http.StatusBadRequest, "invalid_config", OneLine(err))
}

// Set implements console.ConfigService: `tenure config set`'s checks and
// write, then a wait for the reachable runners to read the document.
func (c *consoleConfig) Set(ctx context.Context, ch console.ConfigChange) (console.ConfigView, error) {
	if err := c.parts.ready(); err != nil {
		return console.ConfigView{}, err
	}
	rollout := 100
	if ch.RolloutPercent != nil {
		rollout = *ch.RolloutPercent
	}
	change := DynamicChange{Set: ch.Set, Unset: ch.Unset, Rollout: rollout, By: ch.By}
	// The change on its own first: a bad key or value is named before
	// anything is read.
	if err := CheckUnset(ch.Unset); err != nil {
		return console.ConfigView{}, invalid(err)
	}
	if err := ChangeDynamicDoc(DynamicDoc{}, change).Check(); err != nil {
		return console.ConfigView{}, invalid(err)
	}
	live, err := c.live(ctx)
	if err != nil {
		return console.ConfigView{}, err
	}
	settings := make([]LiveRunner, len(live))
	for i, l := range live {
		settings[i] = LiveRunner{ID: l.info.ID, Reachable: l.err == nil, Settings: l.status.StaticConfig, Lease: l.lease, LeaseErr: l.lerr}
	}
	var notes []string
	errNoCanary := errors.New("no canary")
	doc, rev, err := UpdateDynamicConfig(ctx, c.r.rs, func(cur DynamicDoc) (DynamicDoc, error) {
		if len(ch.Set) == 0 && len(ch.Unset) == 0 && cur.Canary == nil {
			return cur, fmt.Errorf("%w in progress to move (version %d): give set to start one", errNoCanary, cur.Version)
		}
		change.Now = time.Now()
		return ChangeDynamicDoc(cur, change), nil
	}, func(next DynamicDoc) error {
		var refusals []Refusal
		refusals, notes = CheckAgainstRunners(next, settings)
		if len(refusals) > 0 {
			return RefusedError(refusals)
		}
		return nil
	})
	switch {
	case errors.Is(err, ErrRefusedByRunners):
		return console.ConfigView{}, console.NewError(http.StatusConflict, "refused", err)
	case errors.Is(err, errNoCanary), errors.Is(err, ErrInvalidConfig):
		return console.ConfigView{}, invalid(err)
	case errors.Is(err, storage.ErrPrecondition):
		return console.ConfigView{}, console.NewError(http.StatusConflict, console.CodeConflict, err)
	case err != nil:
		return console.ConfigView{}, err
	}
	live = c.awaitApplied(ctx, live, rev)
	v := c.view(storage.ConfigValue{}, live)
	if b, err := json.Marshal(doc); err == nil {
		v = c.view(storage.ConfigValue{Value: b, Revision: rev}, live)
	}
	v.Notes = append(v.Notes, notes...)
	for _, l := range live {
		switch {
		case l.err != nil:
		case l.status.ConfigRevision == nil:
		case *l.status.ConfigRevision < rev:
			v.Notes = append(v.Notes, fmt.Sprintf("runner %s had not read version %d after %s", l.info.ID, doc.Version, ConfigApplyWait))
		case l.status.ConfigError != "":
			v.Notes = append(v.Notes, fmt.Sprintf("runner %s refuses version %d and keeps its settings: %s", l.info.ID, doc.Version, l.status.ConfigError))
		}
	}
	return v, nil
}

// ConfigApplyWait bounds how long a config change (`tenure config set`,
// the console's) waits for the runners that answer to read the version it
// wrote. They watch the key, so a healthy runner reads it within
// milliseconds.
const ConfigApplyWait = 3 * time.Second

// AwaitConfigRead polls the runners that have not read the dynamic config
// document at revision rev yet (those with errs[i] nil whose status
// reports a lower ConfigRevision; a runner too old to report one is not
// waited for) until each has read it, applied or refused, or
// ConfigApplyWait has passed. It updates sts in place; a runner that
// stops answering keeps the status it had.
func AwaitConfigRead(ctx context.Context, runners []storage.RunnerInfo, sts []console.RunnerStatus, errs []error, rev int64,
	status func(context.Context, storage.RunnerInfo) (console.RunnerStatus, error)) {
	ctx, cancel := context.WithTimeout(ctx, ConfigApplyWait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var waiting []int
		for i := range runners {
			if errs[i] == nil && sts[i].ConfigRevision != nil && *sts[i].ConfigRevision < rev {
				waiting = append(waiting, i)
			}
		}
		if len(waiting) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var wg sync.WaitGroup
		for _, i := range waiting {
			wg.Go(func() {
				if st, err := status(ctx, runners[i]); err == nil {
					sts[i] = st
				}
			})
		}
		wg.Wait()
	}
}

// awaitApplied is AwaitConfigRead over the console's live runners.
func (c *consoleConfig) awaitApplied(ctx context.Context, live []liveConfigRunner, rev int64) []liveConfigRunner {
	live = slices.Clone(live)
	infos, sts, errs := make([]storage.RunnerInfo, len(live)), make([]console.RunnerStatus, len(live)), make([]error, len(live))
	for i, l := range live {
		infos[i], sts[i], errs[i] = l.info, l.status, l.err
	}
	AwaitConfigRead(ctx, infos, sts, errs, rev, c.peers.Status)
	for i := range live {
		live[i].status = sts[i]
	}
	return live
}
