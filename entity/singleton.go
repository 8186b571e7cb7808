package entity

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// Singletons: a singleton type has one live instance in the cluster, on
// the runner holding the shard of the entity (type, SingletonID). The
// instance is made when that shard is acquired (no message needed) and its
// Run is supervised for the whole ownership:
//
//   - Run's context ends with the ownership (lock loss, planned release,
//     drain, stop) and with the runner's detachment decision in every mode
//     (like calls, a singleton has no S3 fence: in observe or off mode a
//     runner cut off from etcd keeps its shards, so the decision is what
//     bounds Run before the lease can expire and a successor start).
//   - Run returning (nil, an error or a panic) while the ownership and the
//     decision are live is a restart, after a backoff (singletonBackoffMin
//     doubling to singletonBackoffMax; reset after a run of
//     singletonStableRun).
//   - After a detachment in observe or off mode the ownership may survive:
//     Run is started again once the runner is attached again.
//   - A planned release waits for Run to return, within the release's
//     interrupt timeout, before the lock is deleted: the successor starts
//     only after it.
//
// Invariant: at most one Run of a type is running on a runner, and only
// inside the window where the runner holds the shard and is attached.

// SingletonID is the entity id of a singleton type's instance: its shard
// is the shard of the entity (type, SingletonID).
const SingletonID = "singleton"

// Singleton is the instance of a singleton type: Run is its work, for as
// long as this runner holds its shard and is attached. Run must return
// when ctx ends; returning earlier restarts it after a backoff.
type Singleton interface {
	Run(ctx context.Context) error
}

// SingletonFactory makes the instance of a singleton type each time it
// starts on a runner (a new ownership of its shard, or a restart after
// Run returned).
type SingletonFactory func() (Singleton, error)

// Restart backoff of a singleton whose Run returned.
const (
	singletonBackoffMin = 100 * time.Millisecond
	singletonBackoffMax = 30 * time.Second
	// singletonStableRun: a run that lasted this long resets the backoff.
	singletonStableRun = time.Minute
	// singletonAttachPoll is how often a singleton stopped by a
	// detachment that left the ownership live (observe or off mode)
	// checks whether the runner is attached again.
	singletonAttachPoll = 100 * time.Millisecond
)

// errSingletonReturned is the restart reason of a Run that returned nil
// while it could go on.
var errSingletonReturned = errors.New("entity: singleton Run returned")

// singletonTypes holds the registered singleton types.
type singletonTypes struct {
	mu sync.RWMutex
	m  map[string]SingletonFactory
}

func (s *singletonTypes) register(typ string, f SingletonFactory) error {
	if !typeName.MatchString(typ) {
		return fmt.Errorf("%w: singleton type %q must match %s", ErrInvalidConfig, typ, typeName)
	}
	if f == nil {
		return fmt.Errorf("%w: singleton type %q: nil factory", ErrInvalidConfig, typ)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.m[typ]; dup {
		return fmt.Errorf("%w: singleton type %q registered twice", ErrInvalidConfig, typ)
	}
	if s.m == nil {
		s.m = map[string]SingletonFactory{}
	}
	s.m[typ] = f
	return nil
}

func (s *singletonTypes) names() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Sorted(maps.Keys(s.m))
}

func (s *singletonTypes) clone() *singletonTypes {
	c := &singletonTypes{m: map[string]SingletonFactory{}}
	if s == nil {
		return c
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	maps.Copy(c.m, s.m)
	return c
}

func (s *singletonTypes) factory(typ string) SingletonFactory {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[typ]
}

// RegisterSingleton registers a singleton type, as Host.RegisterSingleton
// does.
func (t *Types) RegisterSingleton(typ string, f SingletonFactory) error {
	return t.single.register(typ, f)
}

// RegisterSingleton registers a singleton type: one instance in the
// cluster, made by f and run (Run) on the runner holding the shard of
// (typ, SingletonID) while it is attached. Singleton types are a namespace
// of their own: a task or entity type may have the same name. The host
// places singletons with the task client given by WithTaskClient (its
// group and shard count); without one they never start, and NewHost
// refuses singleton types it cannot place.
func (h *Host) RegisterSingleton(typ string, f SingletonFactory) error {
	if h.work != nil && h.taskClient == nil { // a live host, not Types.Collect's
		return fmt.Errorf("%w: singleton type %q needs a task client (WithTaskClient) to be placed", ErrInvalidConfig, typ)
	}
	if err := h.single.register(typ, f); err != nil {
		return err
	}
	if h.smetrics != nil {
		h.smetrics.init(typ)
	}
	return nil
}

// SingletonTypes lists the registered singleton types, sorted.
func (h *Host) SingletonTypes() []string { return h.single.names() }

// SingletonShard returns the shard of group (of shards shards) that runs
// singleton type typ.
func SingletonShard(group string, shards int, typ string) storage.ShardID {
	return task.ShardOf(group, shards, typ, SingletonID, "")
}

// SingletonStatus describes a singleton running on this runner.
type SingletonStatus struct {
	Type     string    `json:"type"`
	Shard    string    `json:"shard"`
	Epoch    int64     `json:"epoch"`
	Running  bool      `json:"running"`  // Run is executing now
	Since    time.Time `json:"since"`    // when the current (or last) Run started
	Restarts int       `json:"restarts"` // Run restarts in this ownership
}

// Singletons lists the singletons of the shards this runner owns, sorted
// by type.
func (h *Host) Singletons() []SingletonStatus {
	h.mu.Lock()
	var sups []*supervisor
	for _, e := range h.shards {
		e.sched.mu.Lock()
		sups = append(sups, e.singletons...)
		e.sched.mu.Unlock()
	}
	h.mu.Unlock()
	out := make([]SingletonStatus, 0, len(sups))
	for _, s := range sups {
		out = append(out, s.status())
	}
	slices.SortFunc(out, func(a, b SingletonStatus) int { return strings.Compare(a.Type, b.Type) })
	return out
}

// supervisor runs one singleton type's instance for one ownership.
type supervisor struct {
	e   *shardExec
	typ string
	f   SingletonFactory

	mu       sync.Mutex
	running  bool
	since    time.Time
	restarts int
}

func (s *supervisor) status() SingletonStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SingletonStatus{Type: s.typ, Shard: s.e.own.Shard.String(), Epoch: s.e.own.Epoch,
		Running: s.running, Since: s.since, Restarts: s.restarts}
}

// startSingletons starts the supervisors of the singleton types whose
// shard this ownership holds. Called by run before anything else, so that
// the executor's stop waits for them (workers).
func (e *shardExec) startSingletons() {
	c := e.h.taskClient
	if c == nil {
		return
	}
	for _, typ := range e.h.single.names() {
		if SingletonShard(c.Group(), c.Shards(), typ) != e.own.Shard {
			continue
		}
		s := &supervisor{e: e, typ: typ, f: e.h.single.factory(typ)}
		e.sched.mu.Lock()
		e.singletons = append(e.singletons, s)
		e.sched.mu.Unlock()
		e.sched.workers.Add(1)
		go func() {
			defer e.sched.workers.Done()
			s.supervise()
		}()
	}
}

// supervise starts Run whenever the ownership is live and the runner
// attached, until the ownership ends.
func (s *supervisor) supervise() {
	e := s.e
	backoff := singletonBackoffMin
	for e.ctx.Err() == nil {
		dctx := e.msgs.decision()
		if dctx != nil && dctx.Err() != nil {
			// Detached with the ownership live (observe or off mode):
			// wait for a new decision.
			if !s.pause(singletonAttachPoll) {
				return
			}
			continue
		}
		began := time.Now()
		err := s.runOnce(dctx)
		if e.ctx.Err() != nil {
			return
		}
		if dctx != nil && dctx.Err() != nil {
			continue // stopped by the detachment: restart once attached
		}
		if time.Since(began) >= singletonStableRun {
			backoff = singletonBackoffMin
		}
		reason := "returned"
		var pe *PanicError
		switch {
		case errors.As(err, &pe):
			reason = "panicked"
		case err != nil:
			reason = "failed"
		}
		if err == nil {
			err = errSingletonReturned
		}
		e.h.log.Warn("singleton stopped on its own; restarting after a backoff", "type", s.typ,
			"shard", e.own.Shard.String(), "backoff", backoff, "err", err)
		e.h.smetrics.restarts.WithLabelValues(s.typ, reason).Inc()
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		// Jitter: instances that fail together do not restart together.
		if !s.pause(backoff/2 + rand.N(backoff/2+1)) {
			return
		}
		backoff = min(backoff*2, singletonBackoffMax)
	}
}

// pause waits d or until the ownership ends; it reports whether the
// ownership is still live.
func (s *supervisor) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.e.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runOnce makes an instance and runs it under a context bound to the
// ownership and to the detachment decision dctx (nil: none).
func (s *supervisor) runOnce(dctx context.Context) (err error) {
	e := s.e
	ctx, cancel := context.WithCancelCause(e.ctx)
	defer cancel(nil)
	if dctx != nil {
		stop := context.AfterFunc(dctx, func() { cancel(context.Cause(dctx)) })
		defer stop()
	}
	ctx = ContextWithCaller(ctx, e.h.caller)
	var inst Singleton
	err = safeHook(func() error {
		var ferr error
		inst, ferr = s.f()
		if ferr == nil && inst == nil {
			ferr = errors.New("factory returned no singleton")
		}
		return ferr
	})
	if err != nil {
		return fmt.Errorf("entity: singleton %s: factory: %w", s.typ, err)
	}
	s.mu.Lock()
	s.running, s.since = true, time.Now()
	s.mu.Unlock()
	g := e.h.smetrics.running.WithLabelValues(s.typ)
	g.Inc()
	e.h.log.Info("singleton started", "type", s.typ, "shard", e.own.Shard.String(), "epoch", e.own.Epoch)
	defer func() {
		g.Dec()
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
		e.h.log.Info("singleton stopped", "type", s.typ, "shard", e.own.Shard.String(), "epoch", e.own.Epoch,
			"cause", context.Cause(ctx))
	}()
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: string(debug.Stack())}
		}
	}()
	return inst.Run(ctx)
}

// singletonMetrics are the singleton series.
type singletonMetrics struct {
	running  *prometheus.GaugeVec   // type
	restarts *prometheus.CounterVec // type, reason
}

func newSingletonMetrics(reg prometheus.Registerer) *singletonMetrics {
	m := &singletonMetrics{
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "tenure", Subsystem: "singleton", Name: "running",
			Help: "Singleton instances whose Run is executing on this runner (0 or 1 per type)."}, []string{"type"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tenure", Subsystem: "singleton", Name: "restarts_total",
			Help: "Singleton Runs that returned on their own and were restarted, by reason (returned, failed, panicked)."},
			[]string{"type", "reason"}),
	}
	reg.MustRegister(m.running, m.restarts)
	return m
}

// init exports typ's series at 0, so that alerts see them from the start.
func (m *singletonMetrics) init(typ string) {
	m.running.WithLabelValues(typ)
	for _, r := range []string{"returned", "failed", "panicked"} {
		m.restarts.WithLabelValues(typ, r)
	}
}
