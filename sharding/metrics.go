package sharding

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the sharding series (docs/operations.md, metrics), namespace "tenure",
// subsystem "sharding".
type metrics struct {
	detached            prometheus.Gauge
	detachments         *prometheus.CounterVec // reason
	attachments         prometheus.Counter
	wouldDetach         *prometheus.CounterVec // reason
	keepAliveFailures   prometheus.Counter
	keepAliveStreak     prometheus.Gauge
	keepAliveRTT        prometheus.Histogram // answered keep-alives, send → answer
	leaseLost           prometheus.Counter
	acquireRetries      prometheus.Counter
	retryWindowExhausts prometheus.Counter
	owned               prometheus.Gauge
	assigned            prometheus.Gauge
	locksLost           prometheus.Counter
	straysReleased      prometheus.Counter
	storageErrors       *prometheus.CounterVec // op
	handoff             prometheus.Histogram
	rebalance           prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, deadlineLag func() float64) *metrics {
	const ns, sub = "tenure", "sharding"
	m := &metrics{
		detached: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "detached",
			Help: "1 while the runner is detached (its shard entities stopped), else 0."}),
		detachments: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "detachments_total",
			Help: "Detachments by reason."}, []string{"reason"}),
		attachments: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "attachments_total",
			Help: "Attachments (the first one and every re-attachment)."}),
		wouldDetach: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "would_detach_total",
			Help: "Detachments enforce mode would have made, counted in observe mode."}, []string{"reason"}),
		keepAliveFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "lease_keepalive_failures_total",
			Help: "Failed lease keep-alives."}),
		keepAliveStreak: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "lease_keepalive_failure_streak",
			Help: "Consecutive failed lease keep-alives."}),
		keepAliveRTT: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "lease_keepalive_duration_seconds",
			Help:    "Round trip of answered lease keep-alives, from send to answer: the lease deadline counts from the send, so a slow round trip eats into the detach margin.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "lease_lost_total",
			Help: "Leases found gone (expired or revoked); each is followed by a new registration."}),
		acquireRetries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "acquire_retry_attempts_total",
			Help: "Retries at shards assigned here and found held elsewhere while the membership view shows them free."}),
		retryWindowExhausts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "acquire_retry_window_exhausted_total",
			Help: "Acquire retry windows that ended with such shards still held elsewhere."}),
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "owned_shards",
			Help: "Shards this runner owns (lock held, attached)."}),
		assigned: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "assigned_shards",
			Help: "Shards the assignment gives this runner."}),
		locksLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "locks_lost_total",
			Help: "Owned shard locks found deleted or taken by another lease."}),
		straysReleased: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "stray_locks_released_total",
			Help: "Locks of this runner's lease that nothing ran on (a listing had missed them, or a release had failed), released for their assignees."}),
		storageErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "storage_errors_total",
			Help: "Runner-store calls that failed, by operation."}, []string{"op"}),
		handoff: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "handoff_duration_seconds",
			Help:    "Time to hand one shard over on a planned release: interrupt, requeue, delete the lock.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		rebalance: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "rebalance_duration_seconds",
			Help:    "Time of one rebalance pass: releases, then acquisitions.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	lag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "lease_deadline_lag_seconds",
		Help: "Conservative lease deadline minus now; the runner detaches when it falls to the detach margin."}, deadlineLag)
	reg.MustRegister(m.detached, m.detachments, m.attachments, m.wouldDetach, m.keepAliveFailures,
		m.keepAliveStreak, m.keepAliveRTT, m.leaseLost, m.acquireRetries, m.retryWindowExhausts, m.owned, m.assigned,
		m.locksLost, m.straysReleased, m.storageErrors, m.handoff, m.rebalance, lag)
	m.detached.Set(1) // a runner starts detached until its first keep-alive
	return m
}
