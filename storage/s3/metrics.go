package s3

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/storage"
)

// Request outcomes, the status label of tenure_s3_requests_total.
const (
	StatusOK           = "ok"
	StatusPrecondition = "precondition" // a conditional write lost (412, or 409 ConditionalRequestConflict)
	StatusNotFound     = "not_found"
	StatusUnavailable  = "unavailable" // no answer in time, connection failures, 5xx, throttling
	StatusDenied       = "denied"      // credentials or permissions
	StatusError        = "error"       // anything else: missing bucket, invalid request, caller cancellation, ...
)

// RequestStatus classifies an Observer's err into one of the Status
// constants.
func RequestStatus(err error) string {
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, storage.ErrPrecondition):
		return StatusPrecondition
	case errors.Is(err, storage.ErrNotFound):
		return StatusNotFound
	case errors.Is(err, storage.ErrAccessDenied):
		return StatusDenied
	case errors.Is(err, context.Canceled):
		// The caller gave up; the backend is not to blame.
		return StatusError
	case errors.Is(err, storage.ErrUnavailable):
		return StatusUnavailable
	}
	return StatusError
}

// MetricsObserver returns an Observer, for WithObserver, that counts every
// request in tenure_s3_requests_total{op,status} (status as RequestStatus
// gives it) and times it in tenure_s3_request_duration_seconds{op}, retries
// included. The collectors are registered with reg (nil:
// prometheus.DefaultRegisterer); when several stores share a registry, the
// collectors the first one registered are reused, so all of them count into
// the same series.
func MetricsObserver(reg prometheus.Registerer) Observer {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	requests := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tenure", Subsystem: "s3", Name: "requests_total",
		Help: "S3 requests by operation and outcome (ok, precondition, not_found, unavailable, denied, error).",
	}, []string{"op", "status"}))
	durations := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "tenure", Subsystem: "s3", Name: "request_duration_seconds",
		Help: "S3 request latency by operation, SDK retries included.",
		// 1ms to ~16s: the default request timeout is 10s.
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"op"}))
	return func(op string, err error, d time.Duration) {
		requests.WithLabelValues(op, RequestStatus(err)).Inc()
		durations.WithLabelValues(op).Observe(d.Seconds())
	}
}

// register registers c, or returns the equal collector already registered.
// Any other registration failure leaves c unregistered but working, and is
// logged: metrics must never stop a store from being built.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	slog.Warn("s3: could not register request metrics", "err", err)
	return c
}
