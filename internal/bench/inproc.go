package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/runner"
)

// stopTimeout bounds an in-process runner's graceful stop: its drain
// timeout (10s) plus the interrupt wait and some slack.
const stopTimeout = 30 * time.Second

// inproc is a runner running in the bench process (runner.New and Run),
// with its own metrics registry.
type inproc struct {
	*harness.Run
	id      string
	r       *runner.Runner
	reg     *prometheus.Registry
	logPath string
}

// startRunner starts runner id in this process with the built-in types
// and those register adds, and extra config overrides (key=value); it
// stops when the run ends, if not before.
func (c *cluster) startRunner(id string, register func(*entity.Host) error, extra ...string) (*inproc, error) {
	cfg, err := c.config(id, extra...)
	if err != nil {
		return nil, err
	}
	log, path, err := c.env.logger(safeName(c.Name + "-" + id + ".log"))
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	opts := []runner.Option{runner.WithRegistry(reg), runner.WithLogger(log), runner.WithTypes(runner.RegisterBuiltins)}
	if register != nil {
		opts = append(opts, runner.WithTypes(register))
	}
	r, err := runner.New(cfg, opts...)
	if err != nil {
		return nil, fmt.Errorf("bench: runner %s: %w", id, err)
	}
	x := &inproc{Run: harness.Go(r.Run), id: id, r: r, reg: reg, logPath: path}
	c.env.onClose(func() { x.stop() })
	return x, nil
}

// stop stops the runner gracefully and waits for it, at most stopTimeout.
// It is idempotent.
func (x *inproc) stop() error {
	switch err := x.Stop(stopTimeout); {
	case errors.Is(err, harness.ErrStopTimeout):
		return fmt.Errorf("bench: runner %s did not stop within %s (log %s)", x.id, stopTimeout, x.logPath)
	case err != nil:
		return fmt.Errorf("bench: runner %s: %w (log %s)", x.id, err, x.logPath)
	}
	return nil
}

// failed returns the runner's error if Run has returned early (before
// stop).
func (x *inproc) failed() error {
	exited, err := x.Exited()
	switch {
	case !exited || !x.Running():
		return nil
	case err == nil:
		return fmt.Errorf("bench: runner %s stopped (log %s)", x.id, x.logPath)
	}
	return fmt.Errorf("bench: runner %s: %w (log %s)", x.id, err, x.logPath)
}

// counters sums the counter family name of the runners' registries by the
// value of label (all series when label is ""), keeping only the series
// whose labels match every pair of filter.
func counters(regs []*prometheus.Registry, name, label string, filter map[string]string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, reg := range regs {
		fams, err := reg.Gather()
		if err != nil {
			return nil, fmt.Errorf("bench: reading metrics: %w", err)
		}
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				key, matched := "", 0
				for _, lp := range m.GetLabel() {
					if lp.GetName() == label {
						key = lp.GetValue()
					}
					if v, ok := filter[lp.GetName()]; ok && v == lp.GetValue() {
						matched++
					}
				}
				if matched == len(filter) {
					out[key] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out, nil
}

func registries(rs []*inproc) []*prometheus.Registry {
	out := make([]*prometheus.Registry, len(rs))
	for i, x := range rs {
		out[i] = x.reg
	}
	return out
}
