package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tenurehq/tenure/console"
	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/storage"
)

// The console's JSON API (package console) on the runner's admin server:
// the runner gives it its stores, its own state and the other runners'
// admin endpoints. Every part it needs is looked up when a request comes,
// so that the API is mounted before Run has made them (the admin server
// starts before the sharding manager) and answers 503 until they exist.

// consoleAPI makes the console's API over the runner.
func (r *Runner) consoleAPI(auth *adminAuth) (*console.API, error) {
	tlsCfg, err := AdminTLSClientConfig(r.cfg)
	if err != nil {
		return nil, err
	}
	hp := &console.HTTPPeers{
		Client: &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: console.PeerActionTimeout}).DialContext,
			TLSClientConfig:     tlsCfg,
			TLSHandshakeTimeout: console.PeerActionTimeout,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     30 * time.Second,
		}},
		Token:     auth.token.get,
		UserAgent: "tenure-runner/" + Version + " (console of " + r.cfg.RunnerID + ")",
	}
	peers := &runnerPeers{r: r, http: hp}
	c := &consoleParts{r: r}
	return console.New(console.Deps{
		RunnerID: r.cfg.RunnerID, Cluster: r.cfg.Cluster, Version: Version,
		ProtectReads: r.cfg.Admin.ProtectReads,
		Store:        c, Peers: peers, Auth: consoleAuth{auth},
		Tasks: c, States: consoleStates{c},
		Schedules: c.schedules, Reminders: c.reminders, Call: c.call,
		Operations: func(typ string) []string {
			if _, host := r.parts(); host != nil {
				return host.Operations(typ)
			}
			return nil
		},
		LockHistory: func(s storage.ShardID) []sharding.LockEvent {
			if mgr, _ := r.parts(); mgr != nil {
				return mgr.LockHistory(s)
			}
			return nil
		},
		Config: &consoleConfig{r: r, parts: c, peers: peers},
		Logger: r.log,
	})
}

// serveResident serves GET /debug/shards/{group}/{index}/resident: the
// entities resident here for the shard (user data: behind the admin auth).
func (r *Runner) serveResident(w http.ResponseWriter, req *http.Request) {
	i, err := strconv.Atoi(req.PathValue("index"))
	if err != nil || i < 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": "index " + strconv.Quote(req.PathValue("index")) + ": not a shard index", "code": console.CodeBadRequest})
		return
	}
	rr := r.resident(storage.ShardID{Group: req.PathValue("group"), Index: i})
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rr)
}

// resident lists the entities resident here for shard.
func (r *Runner) resident(shard storage.ShardID) console.ResidentReply {
	rr := console.ResidentReply{Shard: shard.String(), Runner: r.cfg.RunnerID, Resident: []entity.ResidentEntity{}}
	if _, host := r.parts(); host != nil {
		rr.Resident, rr.Owned, rr.Truncated = host.Resident(shard, console.MaxResidentListed)
	}
	return rr
}

// runnerPeers reaches the runners' admin endpoints for the console: this
// runner's own answers without the network, the others' over HTTP with
// this runner's admin credential.
type runnerPeers struct {
	r    *Runner
	http *console.HTTPPeers
}

func (p *runnerPeers) self(ri storage.RunnerInfo) bool { return ri.ID == p.r.cfg.RunnerID }

func (p *runnerPeers) Status(ctx context.Context, ri storage.RunnerInfo) (console.RunnerStatus, error) {
	if !p.self(ri) {
		return p.http.Status(ctx, ri)
	}
	b, err := json.Marshal(p.r.Status())
	if err != nil {
		return console.RunnerStatus{}, err
	}
	return console.DecodeStatus(b)
}

func (p *runnerPeers) Timeline(ctx context.Context, ri storage.RunnerInfo, since time.Time) ([]console.Event, error) {
	if !p.self(ri) {
		return p.http.Timeline(ctx, ri, since)
	}
	return p.r.timeline.Since(since), nil
}

func (p *runnerPeers) Resident(ctx context.Context, ri storage.RunnerInfo, shard storage.ShardID) (console.ResidentReply, error) {
	if !p.self(ri) {
		return p.http.Resident(ctx, ri, shard)
	}
	return p.r.resident(shard), nil
}

func (p *runnerPeers) Drain(ctx context.Context, ri storage.RunnerInfo) error {
	if !p.self(ri) {
		return p.http.Drain(ctx, ri)
	}
	return p.r.startDrain()
}

// consoleParts gives the console the runner's stores and clients once
// Run has made them; before, each answers console.ErrNotRunning.
type consoleParts struct {
	r *Runner

	mu     sync.Mutex
	client *Client
	scheds map[string]*schedule.Client // by group
}

// ready reports whether Run has connected (its stores are open).
func (c *consoleParts) ready() error {
	select {
	case <-c.r.life.ready:
		return c.r.life.stopped(c.r.cfg.RunnerID)
	default:
		return fmt.Errorf("runner %s: %w", c.r.cfg.RunnerID, console.ErrNotRunning)
	}
}

// taskClient returns the runner's own client (made once).
func (c *consoleParts) taskClient(ctx context.Context) (*Client, error) {
	if err := c.ready(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client == nil {
		cl, err := c.r.Client(ctx)
		if err != nil {
			return nil, err
		}
		c.client = cl
	}
	return c.client, nil
}

func (c *consoleParts) Meta(ctx context.Context) (storage.ClusterMeta, error) {
	if err := c.ready(); err != nil {
		return storage.ClusterMeta{}, err
	}
	return c.r.rs.Meta(ctx)
}

func (c *consoleParts) Runners(ctx context.Context) ([]storage.RunnerInfo, int64, error) {
	if err := c.ready(); err != nil {
		return nil, 0, err
	}
	return c.r.rs.Runners(ctx)
}

func (c *consoleParts) ShardLocks(ctx context.Context) ([]storage.ShardLock, int64, error) {
	if err := c.ready(); err != nil {
		return nil, 0, err
	}
	return c.r.rs.ShardLocks(ctx)
}

func (c *consoleParts) Config(ctx context.Context) (storage.ConfigValue, error) {
	if err := c.ready(); err != nil {
		return storage.ConfigValue{}, err
	}
	return c.r.rs.Config(ctx)
}

func (c *consoleParts) List(ctx context.Context, o task.ListOptions) ([]*task.Task, string, error) {
	cl, err := c.taskClient(ctx)
	if err != nil {
		return nil, "", err
	}
	return cl.List(ctx, o)
}

func (c *consoleParts) Get(ctx context.Context, ref string) (*task.Task, error) {
	cl, err := c.taskClient(ctx)
	if err != nil {
		return nil, err
	}
	return cl.Client.Get(ctx, ref)
}

func (c *consoleParts) Replay(ctx context.Context, ref string) (*task.Task, error) {
	cl, err := c.taskClient(ctx)
	if err != nil {
		return nil, err
	}
	return cl.Replay(ctx, ref)
}

func (c *consoleParts) Cancel(ctx context.Context, ref string) (*task.Task, error) {
	cl, err := c.taskClient(ctx)
	if err != nil {
		return nil, err
	}
	return cl.Cancel(ctx, ref)
}

// consoleStates is the console's States: the entity states in the
// runner's object store.
type consoleStates struct{ c *consoleParts }

func (s consoleStates) Get(ctx context.Context, shard storage.ShardID, typ, id string) (*state.Envelope, string, error) {
	if err := s.c.ready(); err != nil {
		return nil, "", err
	}
	return state.NewStore(s.c.r.obj, state.WithMaxSize(s.c.r.cfg.Entity.MaxStateSize)).Get(ctx, shard, typ, id)
}

func (c *consoleParts) reminders(ctx context.Context, shard storage.ShardID, typ, id string) ([]entity.PendingReminder, error) {
	cl, err := c.taskClient(ctx)
	if err != nil {
		return nil, err
	}
	return entity.Reminders(ctx, cl.Store(), shard, typ, id)
}

func (c *consoleParts) call(ctx context.Context, m *entity.Message) ([]byte, error) {
	c.r.mu.Lock()
	cs := c.r.calls
	c.r.mu.Unlock()
	if cs == nil {
		return nil, fmt.Errorf("runner %s: entity calls: %w", c.r.cfg.RunnerID, console.ErrNotRunning)
	}
	return cs.client.Invoke(ctx, m)
}

func (c *consoleParts) schedules(group string) (console.Schedules, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cl, err := c.taskClient(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc, ok := c.scheds[group]; ok {
		return sc, nil
	}
	sc, err := cl.Schedules(schedule.WithGroup(group))
	if err != nil {
		return nil, err
	}
	if c.scheds == nil {
		c.scheds = map[string]*schedule.Client{}
	}
	c.scheds[group] = sc
	return sc, nil
}
