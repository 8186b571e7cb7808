package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/storage"
)

// Prefix is the path the API's endpoints are under.
const Prefix = "/ui/api/"

// Time bounds of the API's handlers. A shape view waits at most
// ViewTimeout for all it reads (each runner's status at most
// PeerStatusTimeout, as `tenure status` does); a data view or an action at
// most ActionTimeout; a config change ConfigTimeout (its checks, its
// write and the wait for the runners to read it).
const (
	ViewTimeout       = 5 * time.Second
	ActionTimeout     = 15 * time.Second
	ConfigTimeout     = 20 * time.Second
	PeerStatusTimeout = time.Second
	PeerActionTimeout = 5 * time.Second
)

// maxBody bounds a request body (a config change, an entity call's input).
const maxBody = 4 << 20

// Store is the part of the runner store the API reads: the cluster's
// shape, its runners, its shard locks and the dynamic config document. A
// storage.RunnerStore is one.
type Store interface {
	Meta(ctx context.Context) (storage.ClusterMeta, error)
	Runners(ctx context.Context) ([]storage.RunnerInfo, int64, error)
	ShardLocks(ctx context.Context) ([]storage.ShardLock, int64, error)
	Config(ctx context.Context) (storage.ConfigValue, error)
}

// Tasks reads and changes tasks: a *task.Client (and so a runner.Client)
// is one.
type Tasks interface {
	List(ctx context.Context, o task.ListOptions) ([]*task.Task, string, error)
	Get(ctx context.Context, ref string) (*task.Task, error)
	Replay(ctx context.Context, ref string) (*task.Task, error)
	Cancel(ctx context.Context, ref string) (*task.Task, error)
}

// States reads entities' durable state: a *state.Store is one.
type States interface {
	Get(ctx context.Context, shard storage.ShardID, typ, id string) (*state.Envelope, string, error)
}

// Schedules lists the schedules of one shard group and reads what their
// latest ticks became: a *schedule.Client is one.
type Schedules interface {
	List(ctx context.Context, o schedule.ListOptions) ([]*schedule.Schedule, string, error)
	History(ctx context.Context, s *schedule.Schedule) (*schedule.History, error)
}

// Deps is what the API works with. RunnerID, Store, Peers and Auth are
// required; an endpoint whose other dependency is nil answers 503
// not_available (a runner still starting).
type Deps struct {
	// RunnerID, Cluster and Version name the serving runner.
	RunnerID, Cluster, Version string
	// ProtectReads makes the shape views need the admin credential
	// (admin.protect_reads).
	ProtectReads bool

	Store Store
	// Peers reaches every runner's admin endpoints, the serving runner's
	// own included (the runner answers those itself).
	Peers Peers
	Auth  Auth

	Tasks  Tasks
	States States
	// Schedules returns the schedule client of a shard group.
	Schedules func(group string) (Schedules, error)
	// Reminders lists an entity's pending reminders (entity.Reminders).
	Reminders func(ctx context.Context, shard storage.ShardID, typ, id string) ([]entity.PendingReminder, error)
	// Call makes an entity call (entity.Caller.Invoke).
	Call func(ctx context.Context, m *entity.Message) ([]byte, error)
	// Operations lists a type's operations as the serving runner knows
	// them (entity.Host.Operations); nil when it does not host the type.
	Operations func(typ string) []string
	// LockHistory returns a shard's recent lock changes as the serving
	// runner saw them (sharding.Manager.LockHistory).
	LockHistory func(storage.ShardID) []sharding.LockEvent
	// Config reads and changes the dynamic config.
	Config ConfigService

	// Logger logs the failures answered 500 (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

// API serves the console's JSON endpoints.
type API struct {
	d    Deps
	mux  *http.ServeMux
	seen seenRunners  // the timeline's runners, registered or lately
	hist historyCache // the schedule histories read lately
}

// New returns the API over d.
func New(d Deps) (*API, error) {
	switch {
	case d.RunnerID == "":
		return nil, errors.New("console: Deps.RunnerID is empty")
	case d.Store == nil || d.Peers == nil || d.Auth == nil:
		return nil, errors.New("console: Deps.Store, Deps.Peers and Deps.Auth are required")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	a := &API{d: d, mux: http.NewServeMux()}
	a.routes()
	return a, nil
}

// route registers h for pattern ("METHOD path" under Prefix) with its
// access rule and time bound.
func (a *API) route(pattern string, acc access, timeout time.Duration, h func(ctx context.Context, w http.ResponseWriter, r *http.Request) error) {
	method, path, _ := strings.Cut(pattern, " ")
	a.mux.HandleFunc(method+" "+Prefix+path, func(w http.ResponseWriter, r *http.Request) {
		if err := a.allow(r, acc); err != nil {
			writeError(w, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		if err := h(ctx, w, r); err != nil {
			if status, _ := answerOf(err); status >= 500 {
				a.d.Logger.Warn("console: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			writeError(w, err)
		}
	})
}

func (a *API) routes() {
	a.route("GET session", open, ViewTimeout, a.session)
	a.route("GET cluster", shape, ViewTimeout, a.cluster)
	a.route("GET shards", shape, ViewTimeout, a.shards)
	a.route("GET shards/{group}/{index}", shape, ViewTimeout, a.shard)
	a.route("GET timeline", shape, ViewTimeout, a.timeline)
	a.route("GET schedules", shape, ViewTimeout, a.schedules)
	a.route("GET config", shape, ViewTimeout, a.configGet)
	a.route("PUT config", secret, ConfigTimeout, a.configPut)
	a.route("GET entities/{type}/{id}", secret, ActionTimeout, a.entityGet)
	a.route("POST entities/{type}/{id}", secret, ActionTimeout, a.entityCall)
	a.route("POST entities/{type}/{id}/{op}", secret, ActionTimeout, a.entityCall)
	a.route("GET tasks", secret, ActionTimeout, a.taskList)
	a.route("GET tasks/{group}/{shard}/{id}", secret, ActionTimeout, a.taskGet)
	a.route("POST tasks/{group}/{shard}/{id}/replay", secret, ActionTimeout, a.taskReplay)
	a.route("POST tasks/{group}/{shard}/{id}/cancel", secret, ActionTimeout, a.taskCancel)
	a.route("POST runners/{id}/drain", secret, ActionTimeout, a.drain)
	a.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, NewError(http.StatusNotFound, CodeNotFound,
			fmt.Errorf("no endpoint %s %s (docs/console.md lists them)", r.Method, r.URL.Path)))
	})
}

// Handler returns the handler of every path under Prefix: mount it there
// (mux.Handle(console.Prefix, api.Handler())).
func (a *API) Handler() http.Handler { return a.mux }

// notAvailable is the error of an endpoint whose dependency is missing.
func notAvailable(what string) error {
	return NewError(http.StatusServiceUnavailable, CodeNotAvailable, fmt.Errorf("%s: %w (starting, or stopped)", what, ErrNotRunning))
}

// unavailable wraps a dependency's failure to answer.
func unavailable(what string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	switch {
	case errors.Is(err, ErrNotRunning):
		return NewError(http.StatusServiceUnavailable, CodeNotAvailable, fmt.Errorf("%s: %w", what, err))
	case errors.Is(err, context.DeadlineExceeded):
		return NewError(http.StatusGatewayTimeout, CodeTimeout, fmt.Errorf("%s: %w", what, err))
	}
	return NewError(http.StatusServiceUnavailable, CodeUnavailable, fmt.Errorf("%s: %w", what, err))
}

// meta reads the cluster meta: 503 before the cluster exists.
func (a *API) meta(ctx context.Context) (storage.ClusterMeta, error) {
	m, err := a.d.Store.Meta(ctx)
	if errors.Is(err, storage.ErrNotFound) {
		return m, NewError(http.StatusServiceUnavailable, CodeUnavailable, errors.New("the cluster is not initialised: no runner has started it yet"))
	}
	if err != nil {
		return m, unavailable("reading the cluster meta from etcd", err)
	}
	return m, nil
}

// group returns the shard group a request names (param), checked against
// the cluster's: "default" when the cluster has it, else its first, when
// none is named.
func group(meta storage.ClusterMeta, param, given string) (string, error) {
	if given == "" {
		for _, g := range meta.Groups {
			if g == storage.DefaultGroup {
				return g, nil
			}
		}
		if len(meta.Groups) == 0 {
			return "", NewError(http.StatusServiceUnavailable, CodeUnavailable, errors.New("the cluster meta has no shard group"))
		}
		return meta.Groups[0], nil
	}
	for _, g := range meta.Groups {
		if g == given {
			return g, nil
		}
	}
	return "", badRequest(param, "%q is not a shard group of the cluster (%s)", given, strings.Join(meta.Groups, ", "))
}

// utc formats t as RFC 3339 in UTC; "" for the zero time.
func utc(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
