package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Step is one step of a Shutdown: what it does, and a function that does
// it, bounded by the context it is given.
type Step struct {
	Name string
	Do   func(ctx context.Context) error
}

// Shutdown is a component's stop order, written as one list: each step
// starts once the one before has returned, whatever it returned, so that a
// failed drain still releases and closes. Run it once.
type Shutdown []Step

// Run runs the steps in order under ctx, logs each step's duration (and
// its error, if any) at debug level on log (nil: none), and returns the
// steps' errors joined, each naming its step.
func (sd Shutdown) Run(ctx context.Context, log *slog.Logger) error {
	var errs []error
	for _, st := range sd {
		start := time.Now()
		err := st.Do(ctx)
		if log != nil {
			log.Debug("stop step done", "step", st.Name, "took", time.Since(start), "err", err)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", st.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Names returns the steps' names, in order.
func (sd Shutdown) Names() []string {
	out := make([]string, len(sd))
	for i, st := range sd {
		out[i] = st.Name
	}
	return out
}
