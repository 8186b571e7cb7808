package runner

import (
	"fmt"
	"math"

	"github.com/tenurehq/tenure/entity"
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

// Counter is the built-in counter's value: its JSON is its durable state
// ({"total": T}, as CounterState), saved to S3 with a conditional write
// after each addition, so it survives passivation, handoff, a crash and a
// restart of the cluster. A call's addition is durable before the reply
// is sent; a task's is written with the task's completion, exactly once.
type Counter struct {
	Total int64 `json:"total"`
}

// CounterDefinition defines the built-in counter under the type name typ
// (TypeCounter for the built-in; embedders may serve it under their own
// name, as the bench does). Its operations: Add, the default (what a call,
// send or task naming no operation runs), takes {"add": N} and returns
// {"total": T}; Get, read-only, returns {"total": T}.
func CounterDefinition(typ string) *entity.Definition {
	return entity.Define[Counter](typ, nil, entity.Default("Add"), entity.ReadOnly("Get"))
}

// Get returns the total.
func (c *Counter) Get(entity.Context) (CounterState, error) {
	return CounterState{Total: c.Total}, nil
}

// Add adds in.Add to the total and returns it; no "add" (or 0) returns it
// unchanged, writing nothing once the counter has been stored. Refusals
// are application errors: a caller gets a 422 with the code (never
// retried), a task fails at once (Permanent). The state is saved after it
// returns (entity.Define); a failed save leaves the total as stored.
func (c *Counter) Add(ctx entity.Context, in CounterInput) (CounterState, error) {
	if in.Add == nil || *in.Add == 0 {
		return CounterState{Total: c.Total}, nil
	}
	n := *in.Add
	if n < -MaxCounterAdd || n > MaxCounterAdd {
		return CounterState{}, entity.Permanent(entity.NewAppError(CounterOutOfRange,
			fmt.Sprintf("counter %s: add = %d: must be in [%d, %d]", ctx.ID(), n, -MaxCounterAdd, MaxCounterAdd)).
			WithDetails(map[string]int64{"add": n, "min": -MaxCounterAdd, "max": MaxCounterAdd}))
	}
	if (n > 0 && c.Total > math.MaxInt64-n) || (n < 0 && c.Total < math.MinInt64-n) {
		return CounterState{}, entity.Permanent(entity.NewAppError(CounterOverflow,
			fmt.Sprintf("counter %s: adding %d to %d overflows", ctx.ID(), n, c.Total)).
			WithDetails(map[string]int64{"add": n, "total": c.Total}))
	}
	c.Total += n
	return CounterState{Total: c.Total}, nil
}
