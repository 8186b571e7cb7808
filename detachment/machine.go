package detachment

import (
	"context"
	"sync"
	"time"
)

// Machine is the detachment state machine of one runner. Its input methods
// and readers are safe for concurrent use. It starts no goroutine of its
// own: it runs on the goroutines of its callers and of its Clock's timers.
//
// It keeps two states. The decision is what enforce mode does: attached or
// detached, with the recovery window, failure streak, storage-error grace
// and lease deadline that drive it; it is computed in every mode. The
// attachment is what the runner does: in enforce mode it follows the
// decision, in observe and off modes it stays attached once started (unless
// Detach is called) and observe mode reports the decision's changes as
// WouldDetach and WouldAttach.
type Machine struct {
	clock    Clock
	lead     time.Duration // see WithTimerLead
	leaseTTL time.Duration

	mu      sync.Mutex
	cfg     Config
	stopped bool // Detach(ReasonStopped) or Close: final

	// What is known of the lease.
	hasLease  bool
	leaseID   int64
	deadline  time.Time // conservative: send time of a confirmed keep-alive + granted TTL
	leaseGone bool      // the current lease was reported lost
	retired   retiredLeases
	streak    int   // consecutive keep-alive failures
	kaErr     error // the last keep-alive error

	// The decision (enforce mode's state).
	dAttached    bool
	dReason      Reason
	dErr         error
	everAttached bool // no recovery window is needed before the first attach
	windowOpen   bool
	windowStart  time.Time
	gracePending bool
	graceStart   time.Time
	graceErr     error

	// forced: an explicit Detach holds the attachment down, whatever the
	// mode, until the decision re-attaches. It implies !dAttached.
	forced       bool
	forcedReason Reason

	// The decision context: live while the decision is attached, in every
	// mode; see Enforcement.
	dctx    context.Context
	dcancel context.CancelCauseFunc

	// The attachment.
	attached   bool
	reason     Reason
	since      time.Time
	generation uint64
	ctx        context.Context
	cancel     context.CancelCauseFunc

	deadlineT, windowT, graceT timerSlot
	timerSeq                   uint64

	subs    []*subscriber // copy-on-write: batches keep a snapshot
	pending []Transition  // produced under mu, taken as one batch
	issued  uint64        // batches issued (the next batch's ticket)

	// Delivery order: batch n is delivered only after batch n-1, each on
	// the goroutine that produced it.
	dmu       sync.Mutex
	dcond     *sync.Cond
	delivered uint64
}

// New returns a machine in the starting state: detached with ReasonStarting,
// generation 0, until the first keep-alive confirms the lease. leaseTTL is
// the TTL the runner's lease was granted with; cfg is validated against it.
func New(cfg Config, leaseTTL time.Duration, opts ...Option) (*Machine, error) {
	if err := cfg.Validate(leaseTTL); err != nil {
		return nil, err
	}
	o := options{clock: SystemClock()}
	for _, opt := range opts {
		opt(&o)
	}
	m := &Machine{
		clock:    o.clock,
		lead:     o.lead,
		leaseTTL: leaseTTL,
		cfg:      cfg,
		dReason:  ReasonStarting,
		reason:   ReasonStarting,
		retired:  newRetiredLeases(),
	}
	m.dcond = sync.NewCond(&m.dmu)
	m.since = m.clock.Now()
	m.ctx, m.cancel = context.WithCancelCause(context.Background())
	m.cancel(&DetachedError{Reason: ReasonStarting, At: m.since})
	m.dctx, m.dcancel = m.ctx, m.cancel
	return m, nil
}

// State is a snapshot of the machine, for status pages and gauges.
type State struct {
	// Attached: the runner may run entities; the attachment context of
	// Generation is live.
	Attached bool
	// Reason says why the runner is detached; empty when attached.
	Reason Reason
	// Since is when Attached last changed (the creation time at first).
	Since time.Time
	// Generation counts attachments: 0 before the first, +1 on each.
	Generation uint64
	Mode       Mode
	// Stopped: Detach(ReasonStopped) or Close was called; final.
	Stopped bool

	// LeaseID is the lease the keep-alives confirm (0 before the first).
	LeaseID int64
	// Deadline is the conservative lease deadline (zero before the first
	// keep-alive); Deadline - now is the lease deadline lag.
	Deadline time.Time
	// DetachAt is Deadline - DetachMargin: when the decision detaches unless
	// a keep-alive moves the deadline.
	DetachAt time.Time
	// Streak is the number of consecutive failed keep-alives.
	Streak int

	// WouldDetach and WouldReason are the decision, what enforce mode does:
	// in enforce mode they mirror !Attached and Reason (except after an
	// explicit Detach, whose reason only Reason carries); in observe and
	// off modes they are the shadow state.
	WouldDetach bool
	WouldReason Reason
	// HealthySince is when the open recovery window started (zero when no
	// window is open): re-attaching needs RecoverWindow from it.
	HealthySince time.Time
	// StorageErrorSince is when the pending storage error's grace started
	// (zero when none is pending).
	StorageErrorSince time.Time
}

// State returns a snapshot. Subscribers may call it.
func (m *Machine) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := State{
		Attached:    m.attached,
		Reason:      m.reason,
		Since:       m.since,
		Generation:  m.generation,
		Mode:        m.cfg.Mode,
		Stopped:     m.stopped,
		LeaseID:     m.leaseID,
		Deadline:    m.deadline,
		Streak:      m.streak,
		WouldDetach: !m.dAttached,
		WouldReason: m.dReason,
	}
	if m.hasLease {
		s.DetachAt = m.cutoff()
	}
	if m.windowOpen {
		s.HealthySince = m.windowStart
	}
	if m.gracePending {
		s.StorageErrorSince = m.graceStart
	}
	return s
}

// Attachment returns the current attachment context, its generation and
// whether the runner is attached. Every shard, entity and task context of the
// runner derives from it, so that one cancellation stops them all. It is
// cancelled when the runner detaches, with a *DetachedError as its
// context.Cause; each attach creates a new one with the next generation.
// While detached it returns the last, already cancelled, context. Subscribers
// may call it.
func (m *Machine) Attachment() (ctx context.Context, generation uint64, attached bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ctx, m.generation, m.attached
}

// Config returns the configuration in force.
func (m *Machine) Config() Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// attachActual opens a new attachment context.
func (m *Machine) attachActual(now time.Time) {
	ended := m.reason
	m.generation++
	m.ctx, m.cancel = context.WithCancelCause(context.Background())
	m.attached, m.reason, m.since = true, "", now
	m.emit(now, Attached, ended, nil)
}

// detachActual cancels the attachment context; the transition is emitted
// after, so a subscriber always finds the context already cancelled.
func (m *Machine) detachActual(now time.Time) {
	reason, err := m.dReason, m.dErr
	if m.forced {
		reason, err = m.forcedReason, nil
	}
	m.cancel(&DetachedError{Reason: reason, Generation: m.generation, At: now, Err: err})
	m.attached, m.reason, m.since = false, reason, now
	m.emit(now, Detached, reason, err)
}

// wantAttached is the attachment the mode asks for.
func (m *Machine) wantAttached() bool {
	switch {
	case m.stopped || !m.everAttached:
		return false
	case m.cfg.Mode == ModeEnforce:
		return m.dAttached
	default:
		return !m.forced
	}
}

// reconcile brings the attachment in line with the mode and the decision and
// reports whether it changed.
func (m *Machine) reconcile(now time.Time) bool {
	want := m.wantAttached()
	switch {
	case want && !m.attached:
		m.attachActual(now)
	case !want && m.attached:
		m.detachActual(now)
	default:
		return false
	}
	return true
}

func (m *Machine) emit(now time.Time, kind TransitionKind, reason Reason, err error) {
	m.pending = append(m.pending, Transition{
		Kind:       kind,
		Reason:     reason,
		Err:        err,
		At:         now,
		Deadline:   m.deadline,
		Generation: m.generation,
		LeaseID:    m.leaseID,
		Mode:       m.cfg.Mode,
		Streak:     m.streak,
	})
}

// retiredLeases remembers the last leases that were lost or replaced, so a
// late keep-alive result for one of them cannot revive it. Bounded: lease
// ids are not reused by etcd, and a result older than the last few
// re-registrations is not plausible.
type retiredLeases struct {
	set  map[int64]struct{}
	fifo []int64
}

const maxRetiredLeases = 64

func newRetiredLeases() retiredLeases {
	return retiredLeases{set: make(map[int64]struct{})}
}

func (r *retiredLeases) has(id int64) bool {
	_, ok := r.set[id]
	return ok
}

func (r *retiredLeases) add(id int64) {
	if r.has(id) {
		return
	}
	if len(r.fifo) == maxRetiredLeases {
		delete(r.set, r.fifo[0])
		r.fifo = r.fifo[1:]
	}
	r.set[id] = struct{}{}
	r.fifo = append(r.fifo, id)
}

// cutoff is when the lease deadline detaches: deadline - DetachMargin, less
// the timer lead. Called with m.mu held.
func (m *Machine) cutoff() time.Time { return m.deadline.Add(-m.cfg.DetachMargin - m.lead) }
