package runner

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/storage"
)

// registerInfo exports the runner's identity, tenure_runner_info{runner,
// version, cluster} (always 1), and the dynamic config it runs:
// tenure_runner_config_version (the document's version) and
// tenure_runner_config_canary (1 under the rollout cut).
func (r *Runner) registerInfo() {
	info := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "tenure", Subsystem: "runner", Name: "config_version",
		Help:        "Version of the dynamic config document in force (0: none).",
		ConstLabels: prometheus.Labels{"runner": r.cfg.RunnerID},
	}, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return float64(r.dynamic.version)
	})
	canary := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "tenure", Subsystem: "runner", Name: "config_canary",
		Help:        "1 when the runner is under the rollout cut of a dynamic config change in progress.",
		ConstLabels: prometheus.Labels{"runner": r.cfg.RunnerID},
	}, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.dynamic.canary {
			return 1
		}
		return 0
	})
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "tenure", Subsystem: "runner", Name: "info",
		Help:        "Runner identity: always 1.",
		ConstLabels: prometheus.Labels{"runner": r.cfg.RunnerID, "version": Version, "cluster": r.cfg.Cluster},
	})
	build.Set(1)
	r.reg.MustRegister(info, canary, build)
}

// watchDynamic applies the cluster's dynamic config document live. A
// document that does not parse, or whose settings are invalid for this
// runner, is ignored with an error log: the runner keeps its last good
// config.
func (r *Runner) watchDynamic(ctx context.Context) {
	for ev := range r.rs.WatchConfig(ctx) {
		if ev.Kind == storage.EventDelete {
			r.applyDynamic(nil, ev.Revision)
			continue
		}
		r.applyDynamic(ev.Value.Value, ev.Value.Revision)
	}
}

func (r *Runner) applyDynamic(raw []byte, revision int64) {
	var doc DynamicDoc
	if raw != nil {
		var err error
		if doc, err = ParseDynamicDoc(raw); err != nil {
			r.rejectDynamic(revision, err)
			return
		}
	}
	det, canary, err := doc.Apply(r.cfg)
	if err != nil {
		r.rejectDynamic(revision, err)
		return
	}
	mgr, _ := r.parts()
	before := mgr.Machine().Config().Mode
	if err := mgr.Machine().SetConfig(det); err != nil {
		r.rejectDynamic(revision, err)
		return
	}
	r.recordMode(before, det.Mode, doc.Version)
	r.mu.Lock()
	changed := r.dynamic.version != doc.Version || r.dynamic.canary != canary
	r.dynamic = dynamicState{version: doc.Version, canary: canary, revision: revision}
	r.mu.Unlock()
	if changed {
		r.log.Info("dynamic config applied", "config_version", doc.Version, "canary", canary,
			"mode", det.Mode, "margin", det.DetachMargin, "recover_window", det.RecoverWindow,
			"bucket", RolloutBucket(r.cfg.RunnerID), "rollout", doc.Rollout)
	}
}

func (r *Runner) rejectDynamic(revision int64, err error) {
	r.mu.Lock()
	r.dynamic.err = "revision " + strconv.FormatInt(revision, 10) + ": " + flatLine(err)
	r.dynamic.revision = revision
	version := r.dynamic.version
	r.mu.Unlock()
	r.log.Error("ignoring invalid dynamic config; keeping the last good one", "revision", revision, "in_force", version, "err", err)
}
