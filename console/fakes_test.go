package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// The fakes behind the API's interfaces: a cluster described by hand.

const testToken = "s3cret"

// fakeStore is etcd's view.
type fakeStore struct {
	meta    storage.ClusterMeta
	runners []storage.RunnerInfo
	locks   []storage.ShardLock
	config  storage.ConfigValue
	err     error
}

func (s *fakeStore) Meta(context.Context) (storage.ClusterMeta, error) {
	if s.meta.Shards == 0 {
		return s.meta, storage.ErrNotFound
	}
	return s.meta, s.err
}

func (s *fakeStore) Runners(context.Context) ([]storage.RunnerInfo, int64, error) {
	return append([]storage.RunnerInfo(nil), s.runners...), 1, s.err
}

func (s *fakeStore) ShardLocks(context.Context) ([]storage.ShardLock, int64, error) {
	return append([]storage.ShardLock(nil), s.locks...), 1, s.err
}

func (s *fakeStore) Config(context.Context) (storage.ConfigValue, error) { return s.config, s.err }

// fakePeers answers for the runners by id: a status JSON, or an error.
type fakePeers struct {
	mu       sync.Mutex
	status   map[string]map[string]any
	down     map[string]error
	events   map[string][]Event
	resident map[string]ResidentReply // by runner
	drained  []string
	sinces   []time.Time
}

func (p *fakePeers) Status(_ context.Context, r storage.RunnerInfo) (RunnerStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.down[r.ID]; err != nil {
		return RunnerStatus{}, err
	}
	b, _ := json.Marshal(p.status[r.ID])
	return DecodeStatus(b)
}

func (p *fakePeers) Timeline(_ context.Context, r storage.RunnerInfo, since time.Time) ([]Event, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sinces = append(p.sinces, since)
	if err := p.down[r.ID]; err != nil {
		return nil, err
	}
	return p.events[r.ID], nil
}

func (p *fakePeers) Resident(_ context.Context, r storage.RunnerInfo, shard storage.ShardID) (ResidentReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.down[r.ID]; err != nil {
		return ResidentReply{}, err
	}
	return p.resident[r.ID], nil
}

func (p *fakePeers) Drain(_ context.Context, r storage.RunnerInfo) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.down[r.ID]; err != nil {
		return err
	}
	p.drained = append(p.drained, r.ID)
	return nil
}

// fakeAuth accepts testToken when configured.
type fakeAuth struct{ configured bool }

func (a fakeAuth) Configured() bool { return a.configured }

func (a fakeAuth) Authorized(r *http.Request) (bool, error) {
	return a.configured && r.Header.Get("Authorization") == "Bearer "+testToken, nil
}

// fakeTasks holds tasks by ref.
type fakeTasks struct {
	mu    sync.Mutex
	tasks []*task.Task
	opts  []task.ListOptions
}

func (f *fakeTasks) List(_ context.Context, o task.ListOptions) ([]*task.Task, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opts = append(f.opts, o)
	var out []*task.Task
	for _, t := range f.tasks {
		if (o.Status == "" || t.Status == o.Status) && (o.Type == "" || t.Type == o.Type) && (o.Shard == nil || *o.Shard == t.Shard) {
			out = append(out, t)
		}
	}
	return out, "", nil
}

func (f *fakeTasks) find(ref string) (*task.Task, error) {
	for _, t := range f.tasks {
		if t.Ref() == ref {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", task.ErrNotFound, ref)
}

func (f *fakeTasks) Get(_ context.Context, ref string) (*task.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.find(ref)
}

func (f *fakeTasks) Replay(_ context.Context, ref string) (*task.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.find(ref)
	if err != nil {
		return nil, err
	}
	if t.Status != task.Failed && t.Status != task.Cancelled {
		return t, fmt.Errorf("%w: replay of a %s task", task.ErrInvalidTransition, t.Status)
	}
	t.Status, t.Attempt = task.Pending, 0
	return t, nil
}

func (f *fakeTasks) Cancel(_ context.Context, ref string) (*task.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.find(ref)
	if err != nil {
		return nil, err
	}
	if t.Status.IsTerminal() {
		return t, fmt.Errorf("%w: cancel of a %s task", task.ErrTerminal, t.Status)
	}
	t.Status = task.Cancelled
	return t, nil
}

// fakeStates holds states by "type/id".
type fakeStates map[string]*state.Envelope

func (f fakeStates) Get(_ context.Context, _ storage.ShardID, typ, id string) (*state.Envelope, string, error) {
	if env, ok := f[typ+"/"+id]; ok {
		return env, "etag", nil
	}
	return nil, "", state.ErrNotFound
}

// fakeSchedules lists fixed schedules, each with one fixed history: its
// last tick 9 h before t0 (03:00) on time after one that skipped two.
type fakeSchedules []*schedule.Schedule

func (f fakeSchedules) List(context.Context, schedule.ListOptions) ([]*schedule.Schedule, string, error) {
	return f, "", nil
}

func (f fakeSchedules) History(_ context.Context, s *schedule.Schedule) (*schedule.History, error) {
	last := t0.Add(-9 * time.Hour)
	run := func(tick time.Time, r schedule.Result) schedule.Run {
		return schedule.Run{Tick: tick, Driver: task.Ref(s.Shard, schedule.DriverID(s.Name, s.Generation, tick)), Status: task.Completed, Result: &r}
	}
	return &schedule.History{Now: t0, Since: last.Add(-24 * time.Hour), Missed: 2, Late: 1, Pending: t0.Add(15 * time.Hour),
		Runs: []schedule.Run{
			run(last.Add(-24*time.Hour), schedule.Result{Outcome: schedule.OutcomeSkipped, Skipped: 2, Next: last}),
			run(last, schedule.Result{Outcome: schedule.OutcomeOnTime, Fired: schedule.TaskID(s.Name, s.Generation, last), Next: t0.Add(15 * time.Hour)}),
		}}, nil
}

// countedSchedules is n schedules whose histories are counted as read.
type countedSchedules struct {
	fakeSchedules
	reads atomic.Int64
}

func (c *countedSchedules) History(ctx context.Context, s *schedule.Schedule) (*schedule.History, error) {
	c.reads.Add(1)
	return c.fakeSchedules.History(ctx, s)
}

// fakeConfig records the changes it is given.
type fakeConfig struct {
	mu      sync.Mutex
	changes []ConfigChange
	err     error
}

func (f *fakeConfig) Get(context.Context) (ConfigView, error) {
	return ConfigView{Version: 3, Revision: 812, Document: json.RawMessage(`{"version":3}`), RolloutPercent: 100, Runners: []ConfigRunner{}}, nil
}

func (f *fakeConfig) Set(_ context.Context, c ConfigChange) (ConfigView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return ConfigView{}, f.err
	}
	f.changes = append(f.changes, c)
	return ConfigView{Version: 4, Revision: 813, Document: json.RawMessage(`{"version":4}`), RolloutPercent: 100, Runners: []ConfigRunner{}}, nil
}

// world is a test cluster: group "default" of 8 shards, runners r1 (the
// serving one), r2 and r3 (unreachable), and the fakes.
type world struct {
	t      *testing.T
	store  *fakeStore
	peers  *fakePeers
	tasks  *fakeTasks
	states fakeStates
	config *fakeConfig
	calls  []*entity.Message
	deps   Deps
	srv    *httptest.Server
	now    time.Time
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func shardID(i int) storage.ShardID { return storage.ShardID{Group: storage.DefaultGroup, Index: i} }

func newWorld(t *testing.T) *world {
	w := &world{t: t, now: t0}
	w.store = &fakeStore{
		meta: storage.ClusterMeta{Shards: 8, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName},
		runners: []storage.RunnerInfo{
			{ID: "r2", Addr: "10.0.0.2:9310", Weight: 1, Version: "v1", StartedAt: t0.Add(-time.Hour)},
			{ID: "r1", Addr: "10.0.0.1:9310", Weight: 1, Version: "v1", StartedAt: t0.Add(-time.Hour), Types: []string{"counter"}},
			{ID: "r3", Addr: "10.0.0.3:9310", Weight: 1, Version: "v1", StartedAt: t0.Add(-time.Hour)},
		},
		config: storage.ConfigValue{Value: []byte(`{"version":3,"rollout":100}`), Revision: 812},
	}
	// Shards 0-2 r1, 3-5 r2, 6 r3 (unreachable), 7 unowned.
	for i, holder := range []string{"r1", "r1", "r1", "r2", "r2", "r2", "r3"} {
		w.store.locks = append(w.store.locks, storage.ShardLock{Shard: shardID(i), RunnerID: holder, Epoch: int64(100 + i)})
	}
	status := func(id string, bucket int) map[string]any {
		return map[string]any{"runner_id": id, "version": "v1", "attached": true, "mode": "enforce", "detach_reason": "",
			"lease_deadline_lag_seconds": 9.2, "draining": false, "config_version": 3, "config_canary": false,
			"resident_entities": 5, "calls_per_second": 12.5, "tasks_per_second": 3.1, "rollout_bucket": bucket,
			"singletons": []map[string]any{{"type": "leader", "shard": "default/1", "epoch": 101, "running": true, "since": t0, "restarts": 0}}}
	}
	w.peers = &fakePeers{
		status: map[string]map[string]any{"r1": status("r1", 37), "r2": status("r2", 12)},
		down:   map[string]error{"r3": errors.New("runner r3: dial tcp 10.0.0.3:9310: connection refused")},
		events: map[string][]Event{
			"r1": {{At: t0.Add(-2 * time.Minute), Kind: EventStarted}, {At: t0.Add(-30 * time.Second), Kind: EventDetached, Reason: "lease-deadline", Generation: 3}},
			"r2": {{At: t0.Add(-time.Minute), Kind: EventKeepAliveFailed, Detail: "deadline exceeded"}, {At: t0.Add(-time.Hour), Kind: EventStarted}},
		},
		resident: map[string]ResidentReply{
			"r1": {Shard: "default/0", Runner: "r1", Owned: true, Resident: []entity.ResidentEntity{{Type: "counter", ID: "c1"}}},
		},
	}
	w.tasks = &fakeTasks{}
	w.states = fakeStates{"counter/c1": {Type: "counter", ID: "c1", Epoch: 100, Rev: 4, RunnerID: "r1", SavedAt: t0, State: json.RawMessage(`{"total":4}`)}}
	w.config = &fakeConfig{}
	w.deps = Deps{
		RunnerID: "r1", Cluster: "dev", Version: "v1",
		Store: w.store, Peers: w.peers, Auth: fakeAuth{configured: true},
		Tasks: w.tasks, States: w.states,
		Schedules: func(string) (Schedules, error) {
			return fakeSchedules{{Name: "nightly", Cron: "0 3 * * *", Type: "echo", CatchUp: schedule.CatchUpAll,
				CatchUpWindow: task.Duration(time.Hour), Generation: 1, CreatedAt: t0, UpdatedAt: t0,
				Shard: schedule.ShardOf(storage.DefaultGroup, 8, "nightly")}}, nil
		},
		Reminders: func(context.Context, storage.ShardID, string, string) ([]entity.PendingReminder, error) {
			return []entity.PendingReminder{{Name: "wake", Due: t0.Add(time.Hour), Ref: "default/3/rem-x"}}, nil
		},
		Call: func(_ context.Context, m *entity.Message) ([]byte, error) {
			w.calls = append(w.calls, m)
			return []byte(`{"total":5}`), nil
		},
		Operations: func(typ string) []string {
			if typ == "counter" {
				return []string{"add", "get"}
			}
			return nil
		},
		LockHistory: func(s storage.ShardID) []sharding.LockEvent {
			return []sharding.LockEvent{{At: t0, Kind: sharding.LockAcquired, Runner: "r1", Epoch: int64(100 + s.Index)}}
		},
		Config: w.config,
		Now:    func() time.Time { return w.now },
	}
	return w
}

// start serves the API over the world's deps (after the test changed
// them).
func (w *world) start() *world {
	api, err := New(w.deps)
	if err != nil {
		w.t.Fatal(err)
	}
	w.srv = httptest.NewServer(api.Handler())
	w.t.Cleanup(w.srv.Close)
	return w
}

// do makes a request (token "" sends none) and returns the status, the
// headers and the body.
func (w *world) do(method, path, token, body string) (int, http.Header, []byte) {
	w.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, w.srv.URL+path, rd)
	if err != nil {
		w.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := w.srv.Client().Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		w.t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return resp.StatusCode, resp.Header, b
}

// get is a GET with the token that must answer 200; the JSON is decoded
// into v.
func (w *world) get(path string, v any) {
	w.t.Helper()
	code, _, b := w.do(http.MethodGet, path, testToken, "")
	if code != http.StatusOK {
		w.t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		w.t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

// wantError checks an error answer: its status, code, and that its
// message names what.
func (w *world) wantError(method, path, token, body string, status int, code, names string) {
	w.t.Helper()
	got, _, b := w.do(method, path, token, body)
	var e struct{ Error, Code string }
	if err := json.Unmarshal(b, &e); err != nil {
		w.t.Fatalf("%s %s: error body %s is not JSON: %v", method, path, b, err)
	}
	if got != status || e.Code != code || !strings.Contains(e.Error, names) {
		w.t.Errorf("%s %s: %d %+v; want %d, code %q, a message naming %q", method, path, got, e, status, code, names)
	}
}

// httptestServer serves h for the test.
func httptestServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
