package messaging

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/internal/tally"

	"github.com/tenurehq/tenure/entity"
)

// Outcome labels of tenure_calls_total: how a call ended for its caller.
const (
	outcomeOK      = "ok"
	outcomeRefused = "refused" // gave up while the owner kept refusing
	outcomeUnknown = "unknown" // ErrOutcomeUnknown, or the handler interrupted by its runner
	outcomeTimeout = "timeout" // the caller's deadline or cancellation
	outcomeError   = "error"   // any other failure (*CallError, bad request)
	// outcomeApplication: the handler returned an *entity.AppError.
	outcomeApplication = "application"
	pathLocal          = "local"
	pathRemote         = "remote"
	rerouteNoOwner     = "no-owner"
	rerouteNotSent     = "not-sent"
	// rerouteUnavailable: the owner could not activate the entity.
	rerouteUnavailable = "unavailable"
	serverRefused      = "refused"
	serverFailed       = "failed"
	serverDelivered    = "ok"
	// serverApplication: the handler returned an application error.
	serverApplication = "application"
)

type clientMetrics struct {
	// calls and duration are striped (package tally): every call updates
	// them, from every core at once.
	calls    *tally.CounterVec
	reroutes *prometheus.CounterVec
	duration *tally.HistogramVec
	// The hot path's children, resolved once: a label lookup hashes the
	// values on every call.
	callOK, sendOK *tally.Counter
	local, remote  *tally.Histogram
}

// observe counts one finished call.
func (m *clientMetrics) observe(kind, outcome string, local bool, seconds float64) {
	switch {
	case outcome == outcomeOK && kind == kindCall:
		m.callOK.Inc()
	case outcome == outcomeOK && kind == kindSend:
		m.sendOK.Inc()
	default:
		m.calls.With(kind, outcome).Inc()
	}
	if local {
		m.local.Observe(seconds)
	} else {
		m.remote.Observe(seconds)
	}
}

func newClientMetrics(r prometheus.Registerer) *clientMetrics {
	m := &clientMetrics{
		calls: tally.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_calls_total",
			Help: "Entity calls and sends made by this process, by kind (call, send) and how they ended (ok; application: the handler returned an application error; refused; unknown; timeout; error).",
		}, []string{"kind", "outcome"}),
		reroutes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_call_reroutes_total",
			Help: "Attempts of entity calls routed again, by reason (a refusal's reason: not-owner, not-attached, shard-moving; not-sent; no-owner; unavailable: the owner could not activate the entity).",
		}, []string{"reason"}),
		duration: tally.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tenure_call_duration_seconds",
			Help: "Duration of entity calls and sends as their caller saw it, by path (local: the caller's runner owns the entity; remote).",
			// 50 µs to ~13 s, ×2 per bucket: a local call is tens of µs, a
			// remote one ~100 µs, a call waiting out a failover seconds.
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 19),
		}, []string{"path"}),
	}
	m.calls = register(r, m.calls)
	m.reroutes = register(r, m.reroutes)
	m.duration = register(r, m.duration)
	// Every series exists from the start at 0, so that increase() and
	// alerts see the first one.
	for _, kind := range []string{kindCall, kindSend} {
		for _, o := range []string{outcomeOK, outcomeRefused, outcomeUnknown, outcomeTimeout, outcomeError, outcomeApplication} {
			m.calls.With(kind, o)
		}
	}
	for _, reason := range []string{string(entity.RefusedNotOwner), string(entity.RefusedNotAttached), string(entity.RefusedShardMoving), rerouteNotSent, rerouteNoOwner, rerouteUnavailable} {
		m.reroutes.WithLabelValues(reason)
	}
	m.callOK, m.sendOK = m.calls.With(kindCall, outcomeOK), m.calls.With(kindSend, outcomeOK)
	m.local, m.remote = m.duration.With(pathLocal), m.duration.With(pathRemote)
	return m
}

type serverMetrics struct {
	requests *tally.CounterVec
	// The outcomes' counters, resolved once (a label lookup hashes the
	// values) and striped (package tally): every call on every core
	// counts.
	delivered, refused, failed, application *tally.Counter
}

func newServerMetrics(r prometheus.Registerer) *serverMetrics {
	m := &serverMetrics{requests: tally.NewCounterVec(prometheus.CounterOpts{
		Name: "tenure_call_server_requests_total",
		Help: "Entity calls and sends this runner received, by outcome (ok, refused: including those read on a stream while stopping, answered not run; application: the handler returned an application error, failed).",
	}, []string{"outcome"})}
	m.requests = register(r, m.requests)
	m.delivered = m.requests.With(serverDelivered)
	m.refused = m.requests.With(serverRefused)
	m.failed = m.requests.With(serverFailed)
	m.application = m.requests.With(serverApplication)
	return m
}

// register registers c with r, or returns the collector already registered
// under its name: two Clients of one process share their counters.
func register[C prometheus.Collector](r prometheus.Registerer, c C) C {
	if r == nil {
		return c
	}
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
