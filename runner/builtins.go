package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

// The built-in task types every standalone runner serves. They stay in
// runner, unlike the http: and exec: handlers (package external): they run
// in the process, need nothing of the platform, and embedders register them
// too (examples/counter, the bench).
const (
	// TypeEcho returns its input as its result (null when empty).
	TypeEcho = "echo"
	// TypeSleep sleeps {"ms": N} milliseconds, honouring interruption, and
	// returns {"slept_ms": N}.
	TypeSleep = "sleep"
	// TypeCounter is a durable counter per entity id: its default
	// operation Add takes {"add": N} and adds N to its total, {} (or no
	// input) reads it; the read-only operation Get reads it; all return
	// {"total": T} (see CounterDefinition).
	TypeCounter = "counter"
)

// maxSleep bounds the built-in sleep's input, so that a typo cannot hold a
// handler slot for days (the task's timeout ends it sooner).
const maxSleep = 24 * time.Hour

// BuiltinTypes returns the built-in task types, sorted.
func BuiltinTypes() []string { return []string{TypeCounter, TypeEcho, TypeSleep} }

// RegisterBuiltins registers the built-in task types on h: "echo" returns
// its input (null when empty); "sleep", with input {"ms": N}, sleeps N
// milliseconds (cut short when the task is interrupted) and returns
// {"slept_ms": N}; "counter" keeps a durable total per entity (see
// TypeCounter and CounterDefinition).
func RegisterBuiltins(h *entity.Host) error {
	for _, typ := range []string{TypeEcho, TypeSleep, TypeCounter} {
		if err := RegisterBuiltin(h, typ); err != nil {
			return err
		}
	}
	return nil
}

// RegisterBuiltin registers the one built-in type typ on h: for an embedder
// that serves a type of its own under one of the built-in names
// (examples/counter has its own counter).
func RegisterBuiltin(h *entity.Host, typ string) error {
	switch typ {
	case TypeEcho:
		return h.RegisterFunc(TypeEcho, echo)
	case TypeSleep:
		return h.RegisterFunc(TypeSleep, sleep)
	case TypeCounter:
		return h.Define(CounterDefinition(TypeCounter))
	}
	return fmt.Errorf("%w: %q is not a built-in type (%v)", ErrInvalidConfig, typ, BuiltinTypes())
}

func echo(_ context.Context, t *task.Task) (json.RawMessage, error) {
	if len(t.Input) == 0 {
		return json.RawMessage("null"), nil
	}
	return t.Input, nil
}

func sleep(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	var in struct {
		MS *int64 `json:"ms"`
	}
	if len(t.Input) > 0 {
		if err := json.Unmarshal(t.Input, &in); err != nil {
			return nil, entity.Permanent(fmt.Errorf("sleep: input must be {\"ms\": N}: %w", err))
		}
	}
	var ms int64
	if in.MS != nil {
		ms = *in.MS
	}
	if ms < 0 || time.Duration(ms) > maxSleep/time.Millisecond {
		return nil, entity.Permanent(fmt.Errorf("sleep: ms = %d: must be in [0, %d]", ms, maxSleep.Milliseconds()))
	}
	timer := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-timer.C:
		return json.RawMessage(`{"slept_ms":` + strconv.FormatInt(ms, 10) + `}`), nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
