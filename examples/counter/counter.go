package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

// counterType is the task and entity type of the counters.
const counterType = "counter"

// maxAdd bounds one addition, so that a typo cannot push a count to the
// edge of int64 in one step.
const maxAdd = 1_000_000_000

// errBadInput is wrapped by every refusal of a task input.
var errBadInput = errors.New("counter: bad input")

// addInput is a counter task's input: {"add": N}.
type addInput struct {
	Add *int64 `json:"add"`
}

// addResult is a counter task's result.
type addResult struct {
	Counter string `json:"counter"`
	Total   int64  `json:"total"`
	// Runner is the runner that holds the instance: which one depends on
	// where the counter's shard lives, and changes when the shard moves.
	Runner string `json:"runner"`
}

// counterState is a counter's durable state: the same shape as the
// built-in counter's (runner.CounterState), so a `tenure run` runner that
// takes a counter's shard over continues its total.
type counterState struct {
	Total int64 `json:"total"`
}

// counter is one counter's instance, bound to its durable state. The host
// calls Handle for one task at a time per instance, so it needs no lock.
type counter struct {
	id       string
	runnerID string
	log      *slog.Logger
	st       *entity.State[counterState]
}

// registerCounter registers the counter entity type on h. Its state is
// loaded from S3 before the factory runs, and fenced by the shard's
// ownership: a runner that lost the shard cannot overwrite its successor's
// total.
func registerCounter(h *entity.Host, runnerID string, log *slog.Logger) error {
	return h.Register(counterType, entity.StatefulHandler(
		func(id string, st *entity.State[counterState]) (entity.Handler[json.RawMessage, addResult], error) {
			return &counter{id: id, runnerID: runnerID, log: log.With("counter", id), st: st}, nil
		}))
}

// OnStart logs the instance's activation, with the total it loaded.
func (c *counter) OnStart(context.Context) error {
	c.log.Info("counter activated", "total", c.st.Get().Total, "rev", c.st.Rev())
	return nil
}

// OnStop logs the instance's end: its total is in S3 already (every task's
// state is written before the task completes).
func (c *counter) OnStop(_ context.Context, reason entity.StopReason) {
	c.log.Info("counter passivated; its total stays in S3", "reason", reason, "total", c.st.Get().Total)
}

// Handle adds the task's {"add": N} to the total and returns the new total.
// Save stages the state; the host writes it, with the task's id and
// result, when Handle returns, before the task completes: a task retried
// after that write completes with the recorded result instead of adding
// again.
func (c *counter) Handle(ctx context.Context, t *task.Task, input json.RawMessage) (addResult, error) {
	n, err := decodeAdd(input)
	if err != nil {
		return addResult{}, err
	}
	s := c.st.Get()
	if (n > 0 && s.Total > math.MaxInt64-n) || (n < 0 && s.Total < math.MinInt64-n) {
		return addResult{}, entity.Permanent(fmt.Errorf("%w: adding %d to %d overflows", errBadInput, n, s.Total))
	}
	s.Total += n
	if err := c.st.Save(ctx); err != nil {
		s.Total -= n
		return addResult{}, err
	}
	return addResult{Counter: c.id, Total: s.Total, Runner: c.runnerID}, nil
}

// decodeAdd parses {"add": N}. Bad input is a permanent failure: retrying
// would not change it.
func decodeAdd(input json.RawMessage) (int64, error) {
	var in addInput
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return 0, entity.Permanent(fmt.Errorf("%w: want {\"add\": N}: %w", errBadInput, err))
	}
	if dec.More() {
		return 0, entity.Permanent(fmt.Errorf("%w: want one JSON object {\"add\": N}", errBadInput))
	}
	if in.Add == nil {
		return 0, entity.Permanent(fmt.Errorf("%w: field \"add\" is missing", errBadInput))
	}
	if *in.Add < -maxAdd || *in.Add > maxAdd {
		return 0, entity.Permanent(fmt.Errorf("%w: add = %d: must be in [%d, %d]", errBadInput, *in.Add, -maxAdd, maxAdd))
	}
	return *in.Add, nil
}
