package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/console"
	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/lifecycle"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

// Version is the software version runners register with.
var Version = "dev"

// Runner is one Tenure runner: storage connections, the sharding manager
// (registration, lease, detachment, shard locks), the entity host, the
// dynamic config watcher and the admin HTTP server, with one owner for their
// lifetimes.
type Runner struct {
	cfg      Config
	log      *slog.Logger // with the runner id
	base     *slog.Logger // without: for components that add it
	reg      prometheus.Registerer
	gatherer prometheus.Gatherer // what /metrics serves
	tracer   trace.TracerProvider
	started  time.Time

	rs    storage.RunnerStore // etcd or S3, as cfg.Coordination says
	obj   *s3store.Store
	tasks *task.Store
	host  *entity.Host
	mgr   *sharding.Manager
	calls *calls // entity messaging (calls.go)
	// served is calls once serving, read without mu: every call of the
	// runner's Client asks for it, from every core.
	served atomic.Pointer[calls]
	admin  *http.Server
	ln     net.Listener

	authorize     CallAuthorizer // WithCallAuthorizer's, nil for none
	registerTypes []func(*entity.Host) error
	types         *entity.Types // collected by New, given to the host by Run
	gatherers     []prometheus.Gatherer

	// life says how far Run has gone, for Client (see life.go).
	life life
	// lookup finds the host to advertise for an unspecified listen
	// address (advertise.go); tests replace it.
	lookup hostLookup

	// timeline records the runner's recent events (timeline.go), served
	// at GET /debug/timeline.
	timeline *console.Timeline

	mu         sync.Mutex
	dynamic    dynamicState
	draining   bool
	registered bool
	act        activity // served calls and completed tasks, sampled (activity.go)
}

// dynamicState is the dynamic config in force.
type dynamicState struct {
	version int64
	canary  bool
	err     string // why the latest document was ignored, if it was
	// revision is the coordination backend's revision of the latest document read, applied
	// or ignored, so that a writer can tell when its write was seen.
	revision int64
}

// Option configures a Runner.
type Option func(*Runner)

// WithRegistry registers the runner's metrics on reg and serves gatherers
// at /metrics on the admin address (merged, as prometheus.Gatherers does).
// Without gatherers reg itself is served, and must then be a
// prometheus.Gatherer too: a *prometheus.Registry is both, so
// WithRegistry(reg) serves what the runner registers. Give a gatherer when
// reg is not one (prometheus.WrapRegistererWith(labels, reg) registers
// through reg, which gathers), or to serve other collectors beside the
// runner's. Default: a private registry with the Go and process
// collectors.
func WithRegistry(reg prometheus.Registerer, gatherers ...prometheus.Gatherer) Option {
	return func(r *Runner) { r.reg, r.gatherers = reg, gatherers }
}

// WithLogger sets the logger (default: from the config's log settings, on
// stderr, see NewLogger). Wrap its handler with NewTraceHandler for the
// trace and span ids in the records of traced operations.
func WithLogger(l *slog.Logger) Option { return func(r *Runner) { r.log = l } }

// WithTracerProvider sends the runner's spans (task claim, execute,
// submit, calls) to tp. Default: the global provider
// (otel.GetTracerProvider()), so that a service's own provider, or the
// one InitTracing sets, is honoured; it is a no-op until one is set. The
// etcd and S3 client spans always go to the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(r *Runner) { r.tracer = tp } }

// WithTypes registers task and entity types: how a Go service embeds
// Tenure. New runs register at once, on a host that only records types
// (see entity.Types.Collect: register may call Register, RegisterFunc and
// Types, nothing else), so that an invalid or duplicate type name fails
// New; the host Run creates starts with them. May be given more than once:
// a type registered by two calls is a duplicate.
func WithTypes(register func(*entity.Host) error) Option {
	return func(r *Runner) { r.registerTypes = append(r.registerTypes, register) }
}

// WithEntities registers entity types defined by their operations
// (entity.Define), as WithTypes with Host.Define would: an invalid
// definition or a duplicate name fails New. May be given more than once.
func WithEntities(defs ...*entity.Definition) Option {
	return WithTypes(func(h *entity.Host) error {
		for i, d := range defs {
			if d == nil {
				return fmt.Errorf("%w: WithEntities: definition %d is nil", ErrInvalidConfig, i)
			}
			if err := h.Define(d); err != nil {
				return err
			}
		}
		return nil
	})
}

// New validates cfg, collects the types of WithTypes and returns a runner;
// Run starts it. Nothing connects before Run. It logs one warning naming
// the environment variables Load ignored (cfg.UnknownEnv).
func New(cfg Config, opts ...Option) (*Runner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, types: &entity.Types{}, life: newLife(), lookup: systemLookup(), timeline: console.NewTimeline(cfg.RunnerID, console.TimelineSize)}
	for _, opt := range opts {
		opt(r)
	}
	if err := r.cfg.resolveAdvertise(r.lookup); err != nil {
		return nil, err
	}
	for _, register := range r.registerTypes {
		if err := r.types.Collect(register); err != nil {
			return nil, fmt.Errorf("runner %s: registering types: %w", cfg.RunnerID, err)
		}
	}
	if err := r.setMetrics(); err != nil {
		return nil, err
	}
	if r.log == nil {
		r.log = NewLogger(cfg.Log, os.Stderr)
	}
	// Components add the runner id themselves; the runner's own messages
	// carry it through r.log.
	r.base = r.log
	r.log = r.log.With("runner", cfg.RunnerID)
	if names := cfg.UnknownEnv(); len(names) > 0 {
		r.log.Warn("ignoring environment variables that name no config key", "vars", strings.Join(names, ","))
	}
	if r.tracer == nil {
		r.tracer = otel.GetTracerProvider()
	}
	return r, nil
}

// NewLogger returns the slog logger the log settings describe. Its
// records carry the trace and span ids of the span in their context (see
// NewTraceHandler).
func NewLogger(c LogConfig, w *os.File) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(NewTraceHandler(slog.NewJSONHandler(w, opts)))
	}
	return slog.New(NewTraceHandler(slog.NewTextHandler(w, opts)))
}

// Config returns the runner's configuration.
func (r *Runner) Config() Config { return r.cfg }

// setMetrics settles where metrics are registered and what /metrics
// serves (see WithRegistry).
func (r *Runner) setMetrics() error {
	if r.reg == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		r.reg = reg
	}
	if slices.Contains(r.gatherers, nil) {
		return fmt.Errorf("%w: WithRegistry: nil gatherer", ErrInvalidConfig)
	}
	switch g, ok := r.reg.(prometheus.Gatherer); {
	case len(r.gatherers) == 1:
		r.gatherer = r.gatherers[0]
	case len(r.gatherers) > 1:
		r.gatherer = prometheus.Gatherers(r.gatherers)
	case ok:
		r.gatherer = g
	default:
		return fmt.Errorf("%w: WithRegistry: the registerer (%T) is no prometheus.Gatherer: give the gatherer /metrics is to serve", ErrInvalidConfig, r.reg)
	}
	return nil
}

// Registry returns the registry the runner's metrics are registered on
// when it is a *prometheus.Registry (the default, or one given to
// WithRegistry); nil otherwise (see Registerer and Gatherer).
func (r *Runner) Registry() *prometheus.Registry {
	reg, _ := r.reg.(*prometheus.Registry)
	return reg
}

// Registerer returns where the runner registers its metrics.
func (r *Runner) Registerer() prometheus.Registerer { return r.reg }

// Gatherer returns what the runner serves at /metrics.
func (r *Runner) Gatherer() prometheus.Gatherer { return r.gatherer }

// AdminAddr returns the address the admin server listens on, once Run has
// started it ("" before, or when disabled).
func (r *Runner) AdminAddr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln == nil {
		return ""
	}
	return r.ln.Addr().String()
}

// clusterProcedure returns the name of the assignment procedure to check
// the cluster meta with: the cluster's own when this version knows it
// (sharding.ClusterProcedure, which the sharding manager adopts the same
// way), else the current one, which EnsureMeta then compares and reports.
// A failed read is left to EnsureMeta to report.
func (r *Runner) clusterProcedure(ctx context.Context) string {
	p, _, err := sharding.ClusterProcedure(ctx, r.rs)
	if err != nil {
		return placement.HashName
	}
	return p.Name()
}

// Run connects, registers and runs the runner until ctx ends, then stops it
// gracefully: it drains (the others take its shards, each handed over after
// its in-flight tasks are requeued), revokes its lease and returns nil. A
// startup failure (unreachable etcd or S3, a missing bucket, a cluster meta
// that disagrees) is returned at once. A runner runs once: a second call
// returns ErrRunAgain.
func (r *Runner) Run(ctx context.Context) (err error) {
	if !r.life.begin() {
		return fmt.Errorf("runner %s: %w", r.cfg.RunnerID, ErrRunAgain)
	}
	// The goroutines the runner starts itself; the components own theirs.
	work := lifecycle.New(context.WithoutCancel(ctx), "runner "+r.cfg.RunnerID)
	// Every way out runs the stop order (stop.go), whatever was started.
	graceful := false
	var cs *calls // entity messaging, once started; published once serving
	defer func() { r.shutdown(work, cs, graceful, &err).Run(context.Background(), r.log) }()
	r.mu.Lock()
	r.started = time.Now()
	r.mu.Unlock()
	if err := r.connect(ctx); err != nil {
		return err
	}
	// A bucket that already shows the other backend's runners refuses
	// this one before it writes anything (see checkBackend).
	if err := r.checkBackend(ctx, false); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.coordRequestTimeout())
	meta := storage.ClusterMeta{Shards: r.cfg.Shards, Groups: sortedGroups(r.cfg.ShardGroups), Hash: r.clusterProcedure(cctx)}
	stored, err := r.rs.EnsureMeta(cctx, meta)
	cancel()
	if err != nil {
		return fmt.Errorf("runner %s: cluster %q: %w", r.cfg.RunnerID, r.cfg.Cluster, err)
	}
	// After the meta: each backend's mark is written before the other's
	// is looked for again (see checkBackend).
	if err := r.checkBackend(ctx, true); err != nil {
		return err
	}
	r.life.connected(stored)

	if err := r.registerSchedules(stored); err != nil {
		return err
	}
	group, err := submitGroup("", r.cfg, stored)
	if err != nil {
		return err
	}
	// The host's own task client: reminders and singleton placement.
	tc, err := task.NewClient(r.tasks, task.ClientConfig{Group: group, Shards: stored.Shards, Waker: r.rs, PlainWakeNotes: r.cfg.Entity.PlainWakeNotes,
		Tracer: r.tracer.Tracer("github.com/tenurehq/tenure/entity"), Logger: r.base})
	if err != nil {
		return fmt.Errorf("runner %s: %w", r.cfg.RunnerID, err)
	}
	// The messaging client delivers to the entities this runner holds
	// straight to the host, and the host's handlers call through it: the
	// host makes it once it exists (WithCallerOf).
	mc := messagingConfig(r.cfg, stored.Shards, group)
	host, err := entity.NewHost(r.tasks, r.rs, r.cfg.RunnerID, r.cfg.EntityConfig(), entity.WithTypes(r.types),
		entity.WithLogger(r.base), entity.WithRegistry(r.reg), entity.WithTracerProvider(r.tracer), entity.WithTaskClient(tc),
		entity.WithCallerOf(func(h *entity.Host) (entity.Caller, error) {
			var err error
			cs, err = startCalls(r.cfg, r.rs, mc, r.cfg.RunnerID, h, r.base, r.reg, r.tracer)
			if err != nil {
				return nil, err
			}
			return cs.client, nil
		}))
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.host = host
	r.mu.Unlock()
	if err := cs.serve(r.cfg, mc, host, r.base, r.reg, r.tracer); err != nil {
		return err
	}
	// Published once serving: Status reads the call listener's address
	// from another goroutine.
	r.mu.Lock()
	r.calls = cs
	r.mu.Unlock()
	r.served.Store(cs)
	if err := r.startAdmin(); err != nil {
		return err
	}
	self := storage.RunnerInfo{
		ID: r.cfg.RunnerID, Addr: r.advertise(), CallAddr: cs.advertise(r.cfg), Weight: r.cfg.Weight,
		Groups: r.cfg.Groups, Version: Version, StartedAt: r.started.UTC(),
		// The task and entity types it hosts (sorted; singleton types are
		// a namespace of their own, never called or submitted to).
		Types: host.Types(),
	}
	mgr, err := sharding.New(r.rs, self, meta, r.cfg.ShardingConfig(),
		sharding.WithHandler(host), sharding.WithRegistry(r.reg), sharding.WithLogger(r.base), sharding.WithEvents(r.recordLease))
	if err != nil {
		return err
	}
	// Before the manager runs, so that the timeline has every transition.
	mgr.Machine().Subscribe(r.recordTransition)
	r.mu.Lock()
	r.mgr = mgr
	r.mu.Unlock()
	r.registerInfo()

	runErr := make(chan error, 1)
	work.Go("sharding manager", func(ctx context.Context) { runErr <- mgr.Run(ctx) })
	work.Go("dynamic config watch", r.watchDynamic)
	work.Go("type gap check", func(ctx context.Context) { r.warnTypeGaps(ctx, cs.table, self.Types) })
	work.Go("activity sampler", r.sampleActivity)
	r.mu.Lock()
	r.registered = true
	r.mu.Unlock()
	r.life.up()
	r.record(console.EventStarted, fmt.Sprintf("version %s, admin %s, calls %s", Version, r.advertise(), self.CallAddr))
	r.log.Info("runner started", "cluster", r.cfg.Cluster, "admin", r.AdminAddr(), "calls", self.CallAddr, "version", Version, "s3_region", r.obj.Region())

	select {
	case err := <-runErr:
		// The manager ended on its own: a startup failure.
		return err
	case <-ctx.Done():
	}
	r.log.Info("stopping: draining shards", "timeout", r.cfg.DrainTimeout)
	r.record(console.EventStopped, "stopping: draining shards, then revoking the lease")
	graceful = true
	return nil
}

// Drain hands the runner's shards over and keeps it running with weight 0
// (the admin endpoint's action).
func (r *Runner) Drain(ctx context.Context) error {
	mgr, _ := r.parts()
	if mgr == nil {
		return errors.New("runner: not running")
	}
	r.setDraining()
	r.record(console.EventDraining, "drain requested: handing the shards over")
	return mgr.Drain(ctx)
}

// parts returns the manager and host once Run has made them (nil before).
func (r *Runner) parts() (*sharding.Manager, *entity.Host) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mgr, r.host
}

func (r *Runner) setDraining() {
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
}

func (r *Runner) closeHost() {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Sharding.InterruptTimeout.Std()+time.Second)
	defer cancel()
	if err := r.host.Close(ctx); err != nil {
		r.log.Warn("entity host did not stop in time", "err", err)
	}
}

// connect opens the coordination store (etcd or S3) and the S3 store, and
// checks the bucket.
func (r *Runner) connect(ctx context.Context) error {
	var err error
	// The lease's keep-alive cadence (lease.keepalive_*) is the sharding
	// manager's: it reaches it through ShardingConfig. On S3 the
	// coordination requests count in the same S3 metrics as the tasks'.
	// On S3 the coordination store shares the tasks' S3 client (one
	// connection pool) and metrics.
	observe := s3store.WithObserver(s3store.MetricsObserver(r.reg))
	client, err := s3store.NewClient(ctx, s3ClientConfig(r.cfg))
	if err != nil {
		return fmt.Errorf("runner %s: %w", r.cfg.RunnerID, err)
	}
	if r.cfg.UsesEtcd() {
		r.rs, err = DialEtcd(ctx, r.cfg, etcd.WithLogger(r.log))
	} else {
		r.rs, err = coordStore(client, r.cfg, r.log, observe)
	}
	if err != nil {
		return fmt.Errorf("runner %s: %w", r.cfg.RunnerID, err)
	}
	r.obj, err = objectStore(client, r.cfg, observe)
	if err == nil {
		err = r.obj.Check(ctx)
	}
	if err != nil {
		r.rs.Close()
		return fmt.Errorf("runner %s: %w", r.cfg.RunnerID, err)
	}
	r.tasks = task.NewStore(r.obj, task.WithMaxInputSize(r.cfg.Entity.MaxInputSize), task.WithLogger(r.log))
	return nil
}

func (r *Runner) closeStores() {
	if r.rs != nil {
		r.rs.Close()
	}
}

func sortedGroups(gs []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(gs)))
}
