package entity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/lifecycle"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/storage"
)

// Host runs the entities and tasks of the shards this runner owns. It is the
// sharding.Handler of the runner's sharding.Manager.
type Host struct {
	cfg      Config
	tasks    *task.Store
	states   *state.Store
	wakes    storage.WakeWatcher
	runnerID string
	reg      *registry
	log      *slog.Logger
	metrics  *metrics
	tracer   trace.Tracer
	slots    chan struct{} // runner-wide handler slots
	// trailing bounds the pointer deletions running after their worker
	// has given back its slot and its entity's turn (see dropAfterTurn).
	trailing chan struct{}
	// sweepSlots bounds the shards sweeping for old finished tasks at once.
	sweepSlots chan struct{}
	caller     Caller // in handlers' contexts, for CallerFrom; nil: none
	// taskClient submits reminders and places singletons; nil: neither.
	taskClient *task.Client
	single     *singletonTypes
	smetrics   *singletonMetrics
	rmetrics   *reminderMetrics
	// routes maps a shard to the executor messages go to: the live
	// ownership's, or a releasing one's until its release has finished
	// (messages are refused as shard-moving meanwhile). Read lock-free on
	// every message; written on acquisitions and ends.
	routes sync.Map // storage.ShardID → *shardExec
	// unhandled holds the types of due tasks left pending here for want
	// of a handler, by when one was last seen (UnhandledTypes).
	unhandled sync.Map // string → time.Time

	mu      sync.Mutex
	shards  map[storage.ShardID]*shardExec
	waiting map[*scheduler]struct{} // schedulers waiting for a runner slot
	lease   int64                   // the runner lease of the latest ownership
	closed  bool
	// active holds the attempts whose handler or commit is under way, by
	// task key, across ownerships: a handler that ignores its interruption
	// may outlive its ownership, and the same task must not start again
	// here while it runs.
	active map[string]*attempt
	// execs holds every executor until everything it started has
	// returned, its ownership live or ended.
	execs map[*shardExec]struct{}
	// work runs the host's goroutines: every shard's executor (including
	// those winding down after a loss) and the janitor, each named, so that
	// a Close that overruns says which shards are still stopping.
	work     *lifecycle.Stopper
	resident residents
	// doubts holds the state objects a write of this runner may still
	// land on, across ownerships of one epoch (see doubts).
	doubts doubts
}

var (
	_ sharding.Handler  = (*Host)(nil)
	_ sharding.Quiescer = (*Host)(nil)
)

// Option configures a Host.
type Option func(*hostOptions)

type hostOptions struct {
	logger   *slog.Logger
	registry prometheus.Registerer
	tracer   trace.TracerProvider
	types    *Types // registered before the host existed (WithTypes)
	caller   Caller // handlers' CallerFrom (WithCaller)
	// callerOf makes the caller from the host itself (WithCallerOf).
	callerOf func(*Host) (Caller, error)
	tasks    *task.Client
}

// WithTaskClient gives the host the task client of its cluster and group:
// reminders are submitted with it, and singleton types are placed by its
// group and shard count. Without one, Remind fails with ErrNoReminders and
// singleton types cannot be registered on the host.
func WithTaskClient(c *task.Client) Option { return func(o *hostOptions) { o.tasks = c } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *hostOptions) { o.logger = l } }

// WithRegistry registers the host's metrics on reg (default: a private
// registry).
func WithRegistry(reg prometheus.Registerer) Option { return func(o *hostOptions) { o.registry = reg } }

// WithTracerProvider sets where task spans go (default: nowhere).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *hostOptions) { o.tracer = tp }
}

// NewHost returns a host executing the tasks of tasks for runner runnerID;
// wakes delivers the wake-ups of the shards it owns (a storage.RunnerStore
// is one). Register the task types before the manager starts.
func NewHost(tasks *task.Store, wakes storage.WakeWatcher, runnerID string, cfg Config, opts ...Option) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if tasks == nil || wakes == nil || runnerID == "" {
		return nil, fmt.Errorf("%w: a task store, a wake-up watcher and a runner id are required", ErrInvalidConfig)
	}
	o := hostOptions{logger: slog.New(slog.DiscardHandler), tracer: noop.NewTracerProvider()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.registry == nil {
		o.registry = prometheus.NewRegistry()
	}
	h := &Host{
		cfg:        cfg,
		tasks:      tasks,
		states:     state.NewStore(tasks.Objects(), state.WithMaxSize(cfg.MaxStateSize)),
		wakes:      wakes,
		runnerID:   runnerID,
		reg:        o.types.registry(),
		log:        o.logger.With("runner", runnerID),
		metrics:    newMetrics(o.registry),
		tracer:     o.tracer.Tracer("github.com/tenurehq/tenure/entity"),
		slots:      make(chan struct{}, cfg.MaxConcurrentPerRunner),
		trailing:   make(chan struct{}, cfg.MaxConcurrentPerRunner),
		sweepSlots: make(chan struct{}, sweepSlots),
		caller:     o.caller,
		taskClient: o.tasks,
		single:     o.types.singletons(),
		smetrics:   newSingletonMetrics(o.registry),
		rmetrics:   newReminderMetrics(o.registry),
		shards:     map[storage.ShardID]*shardExec{},
		waiting:    map[*scheduler]struct{}{},
		active:     map[string]*attempt{},
		execs:      map[*shardExec]struct{}{},
		work:       lifecycle.New(context.Background(), "entity host "+runnerID),
	}
	h.resident.init()
	h.metrics.types = newTypeLabels(func(typ string) bool { _, ok := h.reg.lookup(typ); return ok })
	if names := h.single.names(); len(names) > 0 && h.taskClient == nil {
		return nil, fmt.Errorf("%w: singleton types %v need a task client (WithTaskClient) to be placed", ErrInvalidConfig, names)
	}
	for _, typ := range h.single.names() {
		h.smetrics.init(typ)
	}
	if o.callerOf != nil {
		c, err := o.callerOf(h)
		if err != nil {
			return nil, err
		}
		h.caller = c
	}
	h.work.Go("janitor", h.janitor)
	return h, nil
}

// Register registers an entity type: f creates the instance of an entity id
// on its first task.
func (h *Host) Register(typ string, f Factory) error { return h.reg.register(typ, f) }

// UnhandledTypes lists, sorted, the types of due tasks this host has left
// pending within the last UnhandledWindow for want of a handler: tasks
// submitted for a type no runner of their shard group hosts. `tenure
// status` shows them.
func (h *Host) UnhandledTypes() []string {
	var out []string
	cutoff := time.Now().Add(-UnhandledWindow)
	h.unhandled.Range(func(k, v any) bool {
		if v.(time.Time).After(cutoff) {
			out = append(out, k.(string))
		} else {
			h.unhandled.Delete(k)
		}
		return true
	})
	slices.Sort(out)
	return out
}

// UnhandledWindow is how long UnhandledTypes remembers a type without a
// handler after its last task was seen.
const UnhandledWindow = 10 * time.Minute

// Define registers an entity type defined by its operations (see
// Define). A definition error is returned here.
func (h *Host) Define(d *Definition) error { return h.reg.define(d) }

// RegisterFunc registers a task type handled by fn, with no per-entity
// state.
func (h *Host) RegisterFunc(typ string, fn HandlerFunc) error { return h.reg.registerFunc(typ, fn) }

// Types lists the registered task types, sorted.
func (h *Host) Types() []string { return h.reg.names() }

// ShardAcquired starts executing the shard's tasks.
func (h *Host) ShardAcquired(o sharding.Ownership) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.lease = o.LeaseID
	e := newShardExec(h, o)
	h.shards[o.Shard] = e
	h.routes.Store(o.Shard, e)
	h.execs[e] = struct{}{}
	err := h.work.Go(fmt.Sprintf("shard %s (epoch %d)", o.Shard, o.Epoch), func(context.Context) {
		e.run()
		h.mu.Lock()
		delete(h.execs, e)
		h.mu.Unlock()
	})
	if err != nil { // unreachable: the host quiesces only in Close, under mu
		h.log.Error("shard acquired by a closing host; not served", "shard", o.Shard.String(), "err", err)
	}
}

// ShardReleasing hands the shard over: its handlers have been cancelled; it
// waits for them (bounded by ctx), commits what they finished and puts the
// rest back to pending, and runs the entities' OnStop hooks, all while the
// lock is still held, so that the successor sees every effect. Handlers
// still running when ctx ends are counted and named; their tasks are left
// to the successor's takeover.
func (h *Host) ShardReleasing(ctx context.Context, o sharding.Ownership) {
	e := h.take(o)
	if e == nil {
		return
	}
	e.fate.decide(ctx, true)
	if !e.waitStopped(ctx, string(sharding.LossReleased)) {
		// The lock goes now: messages still running must stop.
		e.msgs.cancelCalls(fmt.Errorf("shard %s released before its running messages finished (the handoff wait ended: %v)", o.Shard, context.Cause(ctx)))
	}
	h.routes.CompareAndDelete(o.Shard, e)
}

// ShardLost abandons the shard: its handlers have been cancelled; their
// tasks are left to the next owner's takeover. It does not block: the
// executor winds down in the background, and handlers still running after
// Config.InterruptTimeout are counted and named.
func (h *Host) ShardLost(o sharding.Ownership, reason sharding.LossReason) {
	e := h.take(o)
	if e == nil {
		return
	}
	h.log.Debug("shard lost; abandoning its tasks to takeover", "shard", o.Shard.String(), "reason", reason)
	h.routes.CompareAndDelete(o.Shard, e)
	e.fate.decide(nil, false)
	name := fmt.Sprintf("shard %s (epoch %d) winding down", o.Shard, o.Epoch)
	if err := h.work.Go(name, func(context.Context) { e.awaitInterrupt(string(reason)) }); err != nil {
		e.awaitInterrupt(string(reason)) // the host is closing: wind down here
	}
}

// Quiesce returns once the work of every ownership that has ended (and of
// every live one: call it after the manager has ended them) has returned,
// or when ctx ends. The manager calls it on stop before revoking its lease.
func (h *Host) Quiesce(ctx context.Context) {
	h.mu.Lock()
	execs := make([]*shardExec, 0, len(h.execs))
	for e := range h.execs {
		execs = append(execs, e)
	}
	h.mu.Unlock()
	for _, e := range execs {
		select {
		case <-e.stopped:
		case <-ctx.Done():
			return
		}
	}
}

// route returns the executor messages for shard go to, nil if none.
func (h *Host) route(shard storage.ShardID) *shardExec {
	if v, ok := h.routes.Load(shard); ok {
		return v.(*shardExec)
	}
	return nil
}

// activate records that an attempt of task key is under way here; it
// reports false if one already is (a handler that outlived its ownership).
func (h *Host) activate(key string, a *attempt) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, busy := h.active[key]; busy {
		return false
	}
	h.active[key] = a
	return true
}

// deactivate ends what activate recorded.
func (h *Host) deactivate(key string, a *attempt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.active[key] == a {
		delete(h.active, key)
	}
}

// isActive reports whether an attempt of task key is under way here.
func (h *Host) isActive(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, busy := h.active[key]
	return busy
}

// take removes the executor of o's ownership.
func (h *Host) take(o sharding.Ownership) *shardExec {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.shards[o.Shard]
	if e == nil || e.own.Epoch != o.Epoch || e.own.Since != o.Since {
		return nil
	}
	delete(h.shards, o.Shard)
	delete(h.waiting, &e.sched)
	return e
}

// Close stops the host: it waits, up to ctx, for executors to wind down
// (the manager interrupts every shard first) and stops the janitor.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.work.Quiesce()
	execs := make([]*shardExec, 0, len(h.shards))
	for s, e := range h.shards {
		execs = append(execs, e)
		h.routes.CompareAndDelete(s, e)
	}
	clear(h.shards)
	h.mu.Unlock()
	for _, e := range execs {
		e.fate.decide(nil, false)
	}
	h.work.Cancel(errHostClosed) // the janitor
	if err := h.work.Stop(ctx); err != nil {
		return fmt.Errorf("entity: host close: %w", err)
	}
	return nil
}

// errHostClosed is the cause the host's own goroutines end with.
var errHostClosed = errors.New("entity: host closed")

// acquireSlot takes a runner-wide handler slot without blocking; on failure
// s is remembered and kicked when a slot frees.
func (h *Host) acquireSlot(s *scheduler) bool {
	select {
	case h.slots <- struct{}{}:
		return true
	default:
	}
	h.mu.Lock()
	h.waiting[s] = struct{}{}
	h.mu.Unlock()
	// A slot may have freed between the try and the registration.
	select {
	case h.slots <- struct{}{}:
		h.mu.Lock()
		delete(h.waiting, s)
		h.mu.Unlock()
		return true
	default:
		return false
	}
}

func (h *Host) releaseSlot() {
	<-h.slots
	h.mu.Lock()
	waiting := make([]*scheduler, 0, len(h.waiting))
	for s := range h.waiting {
		waiting = append(waiting, s)
	}
	clear(h.waiting)
	h.mu.Unlock()
	for _, s := range waiting {
		s.kick()
	}
}

// janitor passivates idle entity instances until ctx ends (Close).
func (h *Host) janitor(ctx context.Context) {
	tick := time.NewTicker(max(h.cfg.MaxIdle/4, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			h.resident.passivateIdle(h, time.Now().Add(-h.cfg.MaxIdle))
		}
	}
}
