package schedule

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Fire outcomes, the values of the outcome label.
const (
	// OutcomeOnTime: the tick fired within the grace.
	OutcomeOnTime = "on_time"
	// OutcomeLate: a tick fired after the grace (a catch-up: CatchUpAll's,
	// or CatchUpOnce's latest tick).
	OutcomeLate = "late"
	// OutcomeSkipped: a late tick that did not fire under CatchUpSkip, or
	// one of the late ticks CatchUpOnce's fire stands for; also a tick
	// whose task the cluster refused (any policy).
	OutcomeSkipped = "skipped"
	// OutcomeMissed: a tick older than the catch-up window when the
	// driver reached it, not fired (CatchUpAll).
	OutcomeMissed = "missed"
)

type metrics struct {
	fires *prometheus.CounterVec
	lag   prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_schedule_fires_total",
			Help: "Schedule ticks by outcome: on_time (fired within the grace), late (fired after the grace by a catch-up), skipped (not fired: catch-up skip or once, or refused), missed (older than the catch-up window: catch-up all).",
		}, []string{"outcome"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tenure_schedule_fire_lag_seconds",
			Help:    "How long after its tick a fired schedule task was submitted (S3 time).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
	}
	for _, o := range []string{OutcomeOnTime, OutcomeLate, OutcomeSkipped, OutcomeMissed} {
		m.fires.WithLabelValues(o)
	}
	if reg != nil {
		m.fires = register(reg, m.fires)
		m.lag = register(reg, m.lag)
	}
	return m
}

// register registers c on reg, or returns the collector already there (a
// second client on the same registry shares the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if prev, ok := are.ExistingCollector.(C); ok {
			return prev
		}
	}
	return c
}
