package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/tenurehq/tenure/entity/task"
)

// ErrBadInput is matched by every *InputError: a task input that does not
// decode into the Go type its typed handler takes.
var ErrBadInput = errors.New("entity: task input does not decode")

// InputError reports a task whose input does not decode into the Go type
// of its typed handler (Func, TaskFunc, Typed). It reaches the host marked
// Permanent: the same bytes would fail every attempt, so the task fails at
// once, with this message as its error.
type InputError struct {
	Task   string // the task's ref, group/index/id
	Type   string // the task's type
	GoType string // the Go type the input was decoded into
	Err    error  // encoding/json's reason
}

// Error names the task, its type and the Go type, with the reason.
func (e *InputError) Error() string {
	return fmt.Sprintf("entity: task %s (type %s): input does not decode into %s: %v", e.Task, e.Type, e.GoType, e.Err)
}

// Unwrap returns encoding/json's error.
func (e *InputError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrBadInput) hold.
func (e *InputError) Is(target error) bool { return target == ErrBadInput }

// Func adapts a handler of typed input and result to a HandlerFunc, for
// Host.RegisterFunc: the task's input is decoded from JSON into an In
// (encoding/json's rules: unknown fields are ignored; an empty input or
// null gives In's zero value), and the Out returned is encoded as the
// task's result. An input that does not decode fails the task at once with
// an *InputError (Permanent); so does a result that does not encode, since
// running again would not change it. An error fn returns is the attempt's,
// as for any handler.
func Func[In, Out any](fn func(ctx context.Context, in In) (Out, error)) HandlerFunc {
	if fn == nil {
		return nil // refused by RegisterFunc, like any nil handler
	}
	return TaskFunc(func(ctx context.Context, _ *task.Task, in In) (Out, error) { return fn(ctx, in) })
}

// TaskFunc is Func for a handler that also reads the task: its ID (the
// same for every attempt: an idempotency key for external calls), Attempt
// or Entity.
func TaskFunc[In, Out any](fn func(ctx context.Context, t *task.Task, in In) (Out, error)) HandlerFunc {
	if fn == nil {
		return nil
	}
	return func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		in, err := decodeInput[In](t)
		if err != nil {
			return nil, err
		}
		out, err := fn(ctx, t, in)
		if err != nil {
			return nil, err
		}
		return encodeResult(t, out)
	}
}

// Handler is an entity instance whose tasks carry an In and return an Out:
// the typed form of Entity, adapted to one by Typed. An instance may also
// implement Starter and Stopper.
type Handler[In, Out any] interface {
	Handle(ctx context.Context, t *task.Task, in In) (Out, error)
}

// Typed adapts a factory of typed instances to a Factory, for
// Host.Register: each task's input is decoded and its result encoded as
// Func does, and the instance's OnStart and OnStop, when it has them, are
// called as for any entity.
func Typed[In, Out any](f func(id string) (Handler[In, Out], error)) Factory {
	if f == nil {
		return nil // refused by Register, like any nil factory
	}
	return func(id string) (Entity, error) {
		h, err := f(id)
		if err != nil {
			return nil, err
		}
		return &typedEntity[In, Out]{h: h}, nil
	}
}

// typedEntity is a Handler seen as an Entity. It implements Starter and
// Stopper whether h does or not: the host then calls a no-op, which costs
// nothing and does not change when an instance starts or stops.
type typedEntity[In, Out any] struct{ h Handler[In, Out] }

func (e *typedEntity[In, Out]) Handle(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	in, err := decodeInput[In](t)
	if err != nil {
		return nil, err
	}
	out, err := e.h.Handle(ctx, t, in)
	if err != nil {
		return nil, err
	}
	return encodeResult(t, out)
}

func (e *typedEntity[In, Out]) OnStart(ctx context.Context) error {
	if s, ok := e.h.(Starter); ok {
		return s.OnStart(ctx)
	}
	return nil
}

func (e *typedEntity[In, Out]) OnStop(ctx context.Context, reason StopReason) {
	if s, ok := e.h.(Stopper); ok {
		s.OnStop(ctx, reason)
	}
}

// decodeInput decodes t's input into an In; empty input is In's zero
// value, as JSON null is.
func decodeInput[In any](t *task.Task) (In, error) {
	var in In
	if len(t.Input) == 0 {
		return in, nil
	}
	if err := json.Unmarshal(t.Input, &in); err != nil {
		return in, Permanent(&InputError{Task: t.Ref(), Type: t.Type, GoType: reflect.TypeFor[In]().String(), Err: err})
	}
	return in, nil
}

// encodeResult encodes a typed handler's result.
func encodeResult[Out any](t *task.Task, out Out) (json.RawMessage, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return nil, Permanent(fmt.Errorf("entity: task %s (type %s): result %s does not encode as JSON: %w",
			t.Ref(), t.Type, reflect.TypeFor[Out]().String(), err))
	}
	return b, nil
}
