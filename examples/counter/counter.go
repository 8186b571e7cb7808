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

// counter is one counter's instance. The host calls Handle for one task at
// a time per instance, so total needs no lock.
type counter struct {
	id       string
	runnerID string
	log      *slog.Logger
	total    int64
}

// registerCounter registers the counter entity type on h.
func registerCounter(h *entity.Host, runnerID string, log *slog.Logger) error {
	return h.Register(counterType, func(id string) (entity.Entity, error) {
		if id == "" {
			// Without an entity id the host would run the tasks concurrently
			// on a shared instance: refuse rather than count wrong.
			return nil, entity.Permanent(fmt.Errorf("%w: a counter task must name its counter (the task's entity)", errBadInput))
		}
		return &counter{id: id, runnerID: runnerID, log: log.With("counter", id)}, nil
	})
}

// OnStart logs the instance's activation: each one starts at zero.
func (c *counter) OnStart(context.Context) error {
	c.log.Info("counter activated; its count starts at 0")
	return nil
}

// OnStop logs the count the instance loses: it was only in memory.
func (c *counter) OnStop(_ context.Context, reason entity.StopReason) {
	c.log.Info("counter passivated; its in-memory count is dropped", "reason", reason, "total", c.total)
}

// Handle adds the task's {"add": N} to the count and returns the new total.
func (c *counter) Handle(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	n, err := decodeAdd(t.Input)
	if err != nil {
		return nil, err
	}
	// An interrupted task is retried (here or on the shard's next owner):
	// adding now would count it twice on this instance.
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	if (n > 0 && c.total > math.MaxInt64-n) || (n < 0 && c.total < math.MinInt64-n) {
		return nil, entity.Permanent(fmt.Errorf("%w: adding %d to %d overflows", errBadInput, n, c.total))
	}
	c.total += n
	return json.Marshal(addResult{Counter: c.id, Total: c.total, Runner: c.runnerID})
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
