package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/lifecycle"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// Manager runs one runner's side of the cluster: its registration and
// lease, the detachment machine fed by every keep-alive result (keepalive.go) and storage
// outcomes, and the shard loop that acquires, verifies and releases the
// shards the assignment gives it. It hands owned shards to a Handler.
//
// Invariants, kept under mu:
//   - a shard is Owned only while attached, and its context derives from
//     the attachment context of generation gen;
//   - a Suspended shard (a lock believed still ours while nothing runs) is
//     re-verified before it is owned again;
//   - a shard is Pending only while the assignment gives it to us;
//   - only the loop goroutine makes lock calls (acquire, verify, release);
//   - nothing is acquired before the start-up settle ends (settle.go): it
//     delays lock calls, never decides ownership, which every acquisition
//     still takes through etcd's transaction.
//
// A shard's states, their allowed transitions and the invariants of the
// per-shard records are in shardstate.go, next to the one function that
// changes them.
type Manager struct {
	store   Store
	meta    storage.ClusterMeta
	proc    placement.Procedure // the assignment procedure meta.Hash names
	cfg     Config
	log     *slog.Logger
	machine *detachment.Machine
	metrics *metrics
	notify  *notifier
	events  func(Event) // WithEvents's, nil for none

	rebalanceSoon trigger // debounced membership change or explicit request
	attachSoon    trigger // the machine re-attached
	reregister    trigger // the lease is gone
	membership    chan storage.MembershipBatch
	drainReq      chan chan error
	debounce      *debouncer

	mu       sync.Mutex
	self     storage.RunnerInfo
	session  storage.Session
	draining bool
	attached bool
	gen      uint64
	// shards holds each shard's state: our lock's (free, pending, owned,
	// releasing, suspended) and the lock the membership view shows.
	shards  shardTable
	runners map[string]storage.RunnerInfo
	// viewRev is the backend's revision the membership view (runners, lock
	// holders) reflects: a listing or event no newer would move the view
	// back in time (a fresh read that raced the stream), so it is skipped.
	// See membership.go.
	viewRev    int64
	assignment placement.Assignment
	// history keeps each shard's recent lock changes (lockhistory.go),
	// recorded as the view absorbs them.
	history lockHistory
	// streamInSync: the membership stream has delivered a listing and
	// reported no break since, so a change of any lock of ours reaches
	// the loop as an event (see refreshLocks). Loop goroutine only.
	streamInSync bool
	running      bool

	// settle holds the first acquisition back while the membership is
	// still changing (settle.go). Loop goroutine only, once Run has
	// registered.
	settle settleState

	// badMoves counts refused shard state changes (bugs; see moveLocked).
	badMoves atomic.Int64
}

// Option configures a Manager.
type Option func(*managerOptions)

type managerOptions struct {
	handler  Handler
	registry prometheus.Registerer
	logger   *slog.Logger
	clock    detachment.Clock
	events   func(Event)
}

// WithHandler sets the shard host (default NopHandler).
func WithHandler(h Handler) Option { return func(o *managerOptions) { o.handler = h } }

// WithRegistry registers the manager's metrics on reg (default: a private
// registry, so nothing is global).
func WithRegistry(reg prometheus.Registerer) Option {
	return func(o *managerOptions) { o.registry = reg }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *managerOptions) { o.logger = l } }

// WithClock sets the detachment machine's clock (default: the system clock).
func WithClock(c detachment.Clock) Option { return func(o *managerOptions) { o.clock = c } }

// Store is the part of the runner store a Manager uses: the cluster meta it
// checks, the registration that holds its lease and locks, and the
// membership it assigns from. A storage.RunnerStore is one.
type Store interface {
	storage.ClusterMetaStore
	storage.Registrar
	storage.MembershipReader
}

// New returns a Manager for the runner self in the cluster described by
// meta. Nothing happens until Run.
func New(store Store, self storage.RunnerInfo, meta storage.ClusterMeta, cfg Config, opts ...Option) (*Manager, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: nil runner store", ErrInvalidConfig)
	}
	if self.ID == "" {
		return nil, fmt.Errorf("%w: runner id is empty", ErrInvalidConfig)
	}
	if math.IsNaN(self.Weight) || math.IsInf(self.Weight, 0) || self.Weight < 0 {
		return nil, fmt.Errorf("%w: runner %s weight %v must be a finite number ≥ 0 (0 drains)", ErrInvalidConfig, self.ID, self.Weight)
	}
	if meta.Shards < 1 {
		return nil, fmt.Errorf("%w: cluster meta shards = %d: must be ≥ 1", ErrInvalidConfig, meta.Shards)
	}
	if len(meta.Groups) == 0 {
		return nil, fmt.Errorf("%w: cluster meta groups: at least one shard group is needed", ErrInvalidConfig)
	}
	proc, err := placement.ProcedureNamed(meta.Hash)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster meta hash: %w", ErrInvalidConfig, err)
	}
	o := managerOptions{handler: NopHandler{}, logger: slog.New(slog.DiscardHandler), clock: detachment.SystemClock()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.registry == nil {
		o.registry = prometheus.NewRegistry()
	}
	machine, err := detachment.New(cfg.Detachment, cfg.LeaseTTL, detachment.WithClock(o.clock),
		detachment.WithTimerLead(timerLead(cfg.Detachment.DetachMargin)))
	if err != nil {
		return nil, err
	}
	m := &Manager{
		store:         store,
		meta:          meta,
		proc:          proc,
		cfg:           cfg,
		log:           o.logger.With("runner", self.ID),
		machine:       machine,
		notify:        &notifier{h: o.handler},
		rebalanceSoon: newTrigger(),
		attachSoon:    newTrigger(),
		reregister:    newTrigger(),
		membership:    make(chan storage.MembershipBatch, 64),
		drainReq:      make(chan chan error),
		self:          self,
		shards:        newShardTable(),
		runners:       map[string]storage.RunnerInfo{},
		history:       newLockHistory(),
		events:        o.events,
	}
	m.debounce = &debouncer{delay: cfg.RebalanceDebounce, t: m.rebalanceSoon}
	m.metrics = newMetrics(o.registry, m.deadlineLag)
	machine.Subscribe(m.onTransition)
	return m, nil
}

// Machine returns the detachment machine (for status and live config).
func (m *Manager) Machine() *detachment.Machine { return m.machine }

// Run registers the runner and runs until ctx ends, then stops: it
// interrupts every shard, waits up to InterruptTimeout for the handler's
// work to return (if the handler is a Quiescer), revokes the lease (freeing
// the locks at once) and returns. Use Drain first for a graceful handoff. A registration that finds
// the runner id still held by a previous incarnation is retried until that
// lease expires.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return errors.New("sharding: Run called twice")
	}
	m.running = true
	m.mu.Unlock()

	// A runner that disagrees with the cluster about its shape must not
	// take part: its assignment would differ from everyone else's.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := m.adoptProcedure(cctx)
	if err == nil {
		_, err = m.store.EnsureMeta(cctx, m.meta)
	}
	cancel()
	if err != nil {
		m.machine.Close()
		return fmt.Errorf("sharding: runner %s: %w", m.self.ID, err)
	}
	if err := m.registerInitial(ctx); err != nil {
		m.machine.Close()
		return err
	}
	now := time.Now()
	m.settle = settleState{registered: now, lastChange: now}
	work := lifecycle.New(ctx, "sharding manager "+m.self.ID)
	work.Go("membership watch", m.watchMembership)
	work.Go("shard loop", m.loop)

	<-ctx.Done()
	m.shutdown(ctx, work).Run(context.WithoutCancel(ctx), m.log)
	return nil
}

// shutdown is the manager's stop order: stop taking work, interrupt,
// release, close. Revoking the lease frees every lock at once, so the
// handlers are let return first: no successor takes a shard whose work
// still runs.
func (m *Manager) shutdown(ctx context.Context, work *lifecycle.Stopper) lifecycle.Shutdown {
	return lifecycle.Shutdown{
		{Name: "stop the membership watch and the shard loop", Do: func(context.Context) error {
			work.Cancel(ctx.Err())
			return work.Stop(context.Background())
		}},
		{Name: "stop the rebalance timer", Do: func(context.Context) error {
			m.debounce.stop()
			return nil
		}},
		{Name: "detach: cancel every shard context", Do: func(context.Context) error {
			m.machine.Detach(detachment.ReasonStopped)
			m.machine.Close()
			return nil
		}},
		{Name: "let the handlers return", Do: func(context.Context) error {
			if q, ok := m.notify.h.(Quiescer); ok {
				qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.InterruptTimeout)
				defer cancel()
				q.Quiesce(qctx)
			}
			return nil
		}},
		{Name: "revoke the lease", Do: func(context.Context) error {
			m.mu.Lock()
			ss := m.session
			m.forgetLocked()
			m.mu.Unlock()
			if ss == nil {
				return nil
			}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.InterruptTimeout)
			defer cancel()
			if err := ss.Close(cctx); err != nil {
				m.log.Warn("revoking the lease failed; locks free when it expires", "err", err)
			}
			return nil
		}},
	}
}

// adoptProcedure makes the runner use the assignment procedure of an
// existing cluster when it knows it, before EnsureMeta compares the rest
// (see ClusterProcedure).
func (m *Manager) adoptProcedure(ctx context.Context) error {
	p, found, err := ClusterProcedure(ctx, m.store)
	if err != nil || !found || p.Name() == m.meta.Hash {
		return err
	}
	m.log.Warn("the cluster was created with an earlier assignment procedure; using it, so that every runner computes the same owners",
		"procedure", p.Name(), "current", placement.HashName)
	m.mu.Lock()
	m.meta.Hash, m.proc = p.Name(), p
	m.mu.Unlock()
	return nil
}

// Procedure returns the assignment procedure the runner uses (the
// cluster's, once Run has read its meta).
func (m *Manager) Procedure() placement.Procedure {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc
}

// Drain hands every shard over gracefully: the runner's weight drops to 0
// (so the others take its shards), and its shards are released, up to 16
// at once, each interrupted and requeued before its lock is deleted. It returns when
// no shard is owned, or with ctx's error.
func (m *Manager) Drain(ctx context.Context) error {
	done := make(chan error, 1)
	select {
	case m.drainReq <- done:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status is a consistent snapshot of the manager.
type Status struct {
	RunnerID     string
	LeaseID      int64
	Attached     bool
	Draining     bool
	Detachment   detachment.State
	Owned        []Ownership       // sorted by shard; empty unless attached
	Assigned     []storage.ShardID // what the assignment gives this runner
	Pending      []storage.ShardID // assigned, held elsewhere, being retried
	Runners      int               // live runners in the view
	GenerationOK bool              // owned contexts belong to the current attachment
}

// Status returns a snapshot. Owned is read under the same lock as the
// attachment flag, so a detached runner never shows owned shards.
func (m *Manager) Status() Status {
	ds := m.machine.State()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{
		RunnerID:     m.self.ID,
		Attached:     m.attached && ds.Attached,
		Draining:     m.draining,
		Detachment:   ds,
		Runners:      len(m.runners),
		GenerationOK: m.gen == ds.Generation,
	}
	if m.session != nil {
		st.LeaseID = m.session.LeaseID()
	}
	// Between the machine's detach and the manager's handling of it the
	// Owned shards still hold contexts that are already cancelled: a
	// detached runner owns nothing, whatever the table says.
	if st.Attached {
		for _, s := range m.shards.inState(shardOwned) {
			st.Owned = append(st.Owned, m.shards.get(s).own.Ownership)
		}
	}
	st.Assigned = m.assignment.ShardsOf(m.self.ID)
	st.Pending = m.shards.inState(shardPending)
	return st
}

func cmpShard(a, b storage.ShardID) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}

// Owned returns the shards owned now, sorted.
func (m *Manager) Owned() []Ownership { return m.Status().Owned }

func (m *Manager) deadlineLag() float64 {
	st := m.machine.State()
	if st.Deadline.IsZero() {
		return 0
	}
	return time.Until(st.Deadline).Seconds()
}

// timerLead is how much earlier than deadline - margin the machine's cutoff
// timer fires, to absorb timer latency so the runner detaches no later than
// the cutoff on a real, loaded clock: a twentieth of the margin, within
// [5ms, 250ms].
func timerLead(margin time.Duration) time.Duration {
	return min(max(margin/20, 5*time.Millisecond), 250*time.Millisecond)
}
