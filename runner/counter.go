package runner

import (
	"context"
	"fmt"
	"math"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

// MaxCounterAdd bounds one addition of the built-in counter, so that a typo
// cannot push a total to the edge of int64 in one step.
const MaxCounterAdd = 1_000_000_000

// Application error codes of the built-in counter (entity.AppError).
const (
	// CounterOutOfRange: an add outside ±MaxCounterAdd.
	CounterOutOfRange = "out_of_range"
	// CounterOverflow: the total would leave int64.
	CounterOverflow = "overflow"
)

// CounterInput is the built-in counter's input: {"add": N}; no "add" (or
// no input at all) reads the total without writing.
type CounterInput struct {
	Add *int64 `json:"add,omitempty"`
}

// CounterState is the built-in counter's durable state and its reply:
// {"total": T}.
type CounterState struct {
	Total int64 `json:"total"`
}

// CounterFactory is the built-in counter's entity type: its total is an
// entity.State saved to S3 with a conditional write, so it survives
// passivation, handoff, a crash and a restart of the cluster. A call's
// addition is durable before the reply is sent (Save writes it); a task's is
// written with the task's completion, exactly once (the host's staging).
// Embedders register it under their own type name, as examples/counter
// and the bench do.
func CounterFactory() entity.Factory {
	return entity.StatefulHandler(func(_ string, st *entity.State[CounterState]) (entity.Handler[CounterInput, CounterState], error) {
		return &counter{st: st}, nil
	})
}

// counter is one counter's instance; the host runs one handler at a time
// on it, so its state needs no lock.
type counter struct {
	st *entity.State[CounterState]
}

// Handle adds in.Add to the total, makes it durable and returns it.
func (c *counter) Handle(ctx context.Context, t *task.Task, in CounterInput) (CounterState, error) {
	if in.Add == nil || *in.Add == 0 {
		return *c.st.Get(), nil
	}
	n := *in.Add
	// Refusals are application errors: a caller gets a 422 with the code
	// (never retried), a task fails at once (Permanent).
	if n < -MaxCounterAdd || n > MaxCounterAdd {
		return CounterState{}, entity.Permanent(entity.NewAppError(CounterOutOfRange,
			fmt.Sprintf("counter %s: add = %d: must be in [%d, %d]", t.Entity, n, -MaxCounterAdd, MaxCounterAdd)).
			WithDetails(map[string]int64{"add": n, "min": -MaxCounterAdd, "max": MaxCounterAdd}))
	}
	s := c.st.Get()
	if (n > 0 && s.Total > math.MaxInt64-n) || (n < 0 && s.Total < math.MinInt64-n) {
		return CounterState{}, entity.Permanent(entity.NewAppError(CounterOverflow,
			fmt.Sprintf("counter %s: adding %d to %d overflows", t.Entity, n, s.Total)).
			WithDetails(map[string]int64{"add": n, "total": s.Total}))
	}
	s.Total += n
	if err := c.st.Save(ctx); err != nil {
		// Not added: memory must not keep what S3 may not have. Had the
		// write landed after all, the next save finds the ETag changed and
		// is fenced, and the instance reloads the stored total.
		s.Total -= n
		return CounterState{}, err
	}
	return *s, nil
}
