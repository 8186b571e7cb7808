package entity

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/internal/tally"
)

// Task outcomes, the values of the outcome label.
const (
	outcomeCompleted = "completed"
	outcomeRetried   = "retried"   // failed attempt, retry scheduled
	outcomeFailed    = "failed"    // final failure
	outcomeCancelled = "cancelled" // cancel requested and honoured
	outcomeRequeued  = "requeued"  // planned handoff put it back to pending
	outcomeAbandoned = "abandoned" // shard lost or runner detached mid-run: left to takeover
	outcomeFenced    = "fenced"    // the claim was lost: the commit was refused by CAS
)

// metrics are the entity and task series (docs/operations.md, metrics),
// namespace "tenure".
type metrics struct {
	// types bounds the type label's values (see typeLabels); nil keeps
	// them verbatim (tests that build metrics alone).
	types         *typeLabels
	attempts      *prometheus.CounterVec   // type, outcome
	tasksOld      *prometheus.CounterVec   // type, outcome: tenure_tasks_total, deprecated name of attempts
	duration      *prometheus.HistogramVec // type
	startLatency  prometheus.Histogram     // submit (created_at) → handler start, S3 time
	claims        prometheus.Counter
	claimRaces    prometheus.Counter
	takeovers     prometheus.Counter
	unhandled     *prometheus.CounterVec // type
	corrupt       prometheus.Counter
	stalePointers prometheus.Counter
	resident      prometheus.Gauge
	passivations  *prometheus.CounterVec // reason
	running       prometheus.Gauge
	queued        prometheus.Gauge
	reconciles    prometheus.Counter
	// reconcileFound counts the pointers a listing found that no wake-up
	// had announced, past an ownership's first complete listing: lost
	// wake-ups.
	reconcileFound prometheus.Counter
	wakeups        prometheus.Counter
	stuck          prometheus.Counter     // handlers that ignored cancellation past the interrupt wait
	purged         *prometheus.CounterVec // status: finished tasks deleted by the retention sweep
	sweeps         prometheus.Counter     // retention sweep passes completed
	// msgs holds the children of tenure_entity_messages_total, by kind
	// then outcome, and msgDur those of the duration histogram, by kind:
	// resolved once, since every message counts.
	// Both are striped (package tally): every local call updates them,
	// from every core at once.
	msgs   map[string]map[string]*tally.Counter
	msgDur map[string]*tally.Histogram
	// stateLoads and stateSaves hold the children of the state counters by
	// outcome, pre-initialised.
	stateLoads   map[string]prometheus.Counter
	stateSaves   map[string]prometheus.Counter
	stateBytes   prometheus.Histogram
	stateLoadDur prometheus.Histogram
	stateSaveDur prometheus.Histogram
	// stateRefences counts activations that wrote the state back because a
	// save of theirs might still land (see doubts).
	stateRefences prometheus.Counter

	// served and completed count the messages whose handler ran to an end
	// (any outcome) and the task attempts that completed: Host.Activity
	// reads them, cheaper than gathering the series.
	served    *tally.Counter
	completed atomic.Uint64
}

// attempt counts one attempt of a task of type typ ending with outcome.
func (m *metrics) attempt(typ, outcome string) {
	v := m.types.value(typ)
	if outcome == outcomeCompleted {
		m.completed.Add(1)
	}
	m.attempts.WithLabelValues(v, outcome).Inc()
	m.tasksOld.WithLabelValues(v, outcome).Inc()
}

// attemptDuration is the handler run time histogram of type typ.
func (m *metrics) attemptDuration(typ string) prometheus.Observer {
	return m.duration.WithLabelValues(m.types.value(typ))
}

// unhandledType counts a due task of type typ left for want of a handler.
func (m *metrics) unhandledType(typ string) { m.unhandled.WithLabelValues(m.types.value(typ)).Inc() }

// messages is the counter of messages of kind (call, send) with outcome.
func (m *metrics) messages(kind, outcome string) *tally.Counter { return m.msgs[kind][outcome] }

// messageDuration is the handler duration histogram of messages of kind.
func (m *metrics) messageDuration(kind string) *tally.Histogram { return m.msgDur[kind] }

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns = "tenure"
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "attempts_total",
			Help: "Task attempts by type and outcome."}, []string{"type", "outcome"}),
		tasksOld: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "total",
			Help: "Deprecated: the same series as tenure_tasks_attempts_total under its old name; removed in the next release."},
			[]string{"type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: "tasks", Name: "duration_seconds",
			Help: "Handler run time of one attempt.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"type"}),
		startLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: "tasks", Name: "start_latency_seconds",
			Help: "From submission to handler start, in S3 time (immediate tasks only).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		claims: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "claims_total",
			Help: "Successful claims."}),
		claimRaces: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "claim_conflicts_total",
			Help: "Claims and commits that lost a compare-and-swap race and re-read the task."}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "takeovers_total",
			Help: "Tasks left running by a previous owner (or a previous attachment) reclaimed."}),
		unhandled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "unhandled_total",
			Help: "Due tasks left pending because no handler is registered for their type here."}, []string{"type"}),
		corrupt: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "corrupt_total",
			Help: "Task objects that did not decode, moved to failed with their bytes kept."}),
		stalePointers: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "stale_pointers_total",
			Help: "Ready pointers deleted because their task had moved on or never existed."}),
		resident: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "entity", Name: "resident",
			Help: "Entity instances in memory."}),
		passivations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "entity", Name: "passivations_total",
			Help: "Entity instances stopped, by reason."}, []string{"reason"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "tasks", Name: "running",
			Help: "Handlers running now."}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "tasks", Name: "queued",
			Help: "Known ready tasks of owned shards not running yet (due or scheduled)."}),
		reconciles: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "reconciles_total",
			Help: "Listings of an owned shard's ready pointers."}),
		reconcileFound: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "reconcile_found_total",
			Help: "Ready pointers a listing of an owned shard found that no wake-up had announced (not counting an ownership's first complete listing): lost wake-ups, found up to entity.reconcile_max_interval late."}),
		wakeups: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "wakeups_total",
			Help: "Wake-ups received for owned shards."}),
		stuck: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "interrupt_overruns_total",
			Help: "Handlers still running when the wait after an interruption ended (they ignore their context)."}),
	}
	m.purged = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "purged_total",
		Help: "Finished tasks deleted by the retention sweep of the shards this runner owns (entity.task_retention), by status."}, []string{"status"})
	m.sweeps = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "tasks", Name: "sweeps_total",
		Help: "Retention sweep passes completed over owned shards."})
	msgs := tally.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "entity", Name: "messages_total",
		Help: "Messages delivered to this runner's entities, by kind (call, send) and outcome (ok; application: the handler returned an application error; error; panic; refused; cancelled: interrupted or not started)."},
		[]string{"kind", "outcome"})
	msgDur := tally.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: "entity", Name: "message_duration_seconds",
		Help:    "Handler run time of one message (call or send), from its turn to its reply.",
		Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12)}, []string{"kind"})
	m.msgs, m.msgDur = map[string]map[string]*tally.Counter{}, map[string]*tally.Histogram{}
	for _, kind := range []string{kindCall, kindSend} {
		m.msgs[kind] = map[string]*tally.Counter{}
		for _, outcome := range []string{msgOK, msgError, msgApplication, msgPanic, msgRefused, msgCancelled} {
			m.msgs[kind][outcome] = msgs.With(kind, outcome)
		}
		m.msgDur[kind] = msgDur.With(kind)
	}
	m.served = tally.NewCounter()
	reg.MustRegister(msgs, msgDur)
	m.registerState(reg)
	reg.MustRegister(m.attempts, m.tasksOld, m.duration, m.startLatency, m.claims, m.claimRaces, m.takeovers, m.unhandled,
		m.corrupt, m.stalePointers, m.resident, m.passivations, m.running, m.queued, m.reconciles, m.reconcileFound, m.wakeups, m.stuck,
		m.purged, m.sweeps)
	return m
}

// registerState creates and registers the durable state series.
func (m *metrics) registerState(reg prometheus.Registerer) {
	const ns, sub = "tenure", "entity_state"
	loads := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "loads_total",
		Help: "Entity state loads at activation, by outcome (ok, absent, corrupt, fenced, error)."}, []string{"outcome"})
	saves := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "saves_total",
		Help: "Entity state writes, by outcome (ok, conflict: fenced off by a newer owner, too_large, error)."}, []string{"outcome"})
	m.stateLoads, m.stateSaves = map[string]prometheus.Counter{}, map[string]prometheus.Counter{}
	for _, o := range []string{stateOK, stateAbsent, stateCorrupt, stateFenced, stateError} {
		m.stateLoads[o] = loads.WithLabelValues(o)
	}
	for _, o := range []string{stateOK, stateConflict, stateTooLarge, stateError} {
		m.stateSaves[o] = saves.WithLabelValues(o)
	}
	m.stateBytes = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "bytes",
		Help: "Size of the entity states written, in bytes.", Buckets: prometheus.ExponentialBuckets(64, 4, 10)})
	m.stateLoadDur = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "load_duration_seconds",
		Help: "Time to load and fence an entity's state at activation.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	m.stateSaveDur = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "save_duration_seconds",
		Help: "Time of one conditional state write.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	m.stateRefences = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "refences_total",
		Help: "Activations that wrote the state back, the stored epoch already theirs, because a save of unknown outcome might still land."})
	reg.MustRegister(loads, saves, m.stateBytes, m.stateLoadDur, m.stateSaveDur, m.stateRefences)
}
