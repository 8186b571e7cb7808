package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// Typed inputs and results: the client side of entity.Func, entity.TaskFunc
// and entity.Typed, which decode a task's input into a Go value and encode
// the handler's Go result.

var (
	// ErrNotCompleted reports a Result asked of a task that has not
	// completed: pending, running, failed or cancelled.
	ErrNotCompleted = errors.New("task: not completed")
	// ErrResultType reports a completed task whose result does not decode
	// into the Go type asked for; *ResultError names both.
	ErrResultType = errors.New("task: result does not decode into the wanted type")
)

// ResultError reports a completed task's result that does not decode into
// the Go type Result was asked for: the submitter and the handler disagree
// on the result's shape.
type ResultError struct {
	Ref    string // the task's ref
	GoType string // the Go type asked for
	Err    error  // encoding/json's reason
}

// Error names the task and the Go type, with the reason.
func (e *ResultError) Error() string {
	return fmt.Sprintf("task: result of %s does not decode into %s: %v", e.Ref, e.GoType, e.Err)
}

// Unwrap returns encoding/json's error.
func (e *ResultError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrResultType) hold.
func (e *ResultError) Is(target error) bool { return target == ErrResultType }

// Submitter submits tasks: a *Client has the method, and so does a client
// that embeds one (runner.Client).
type Submitter interface {
	Submit(ctx context.Context, req SubmitRequest) (*Task, bool, error)
}

// SubmitInput is Submit with in, encoded as JSON, as the task's input: the
// client side of a handler written with entity.Func. req.Input must be
// empty. An input that does not encode is refused with a *ValidationError
// before any I/O.
func SubmitInput[In any](ctx context.Context, s Submitter, req SubmitRequest, in In) (*Task, bool, error) {
	if len(req.Input) > 0 {
		return nil, false, &ValidationError{Field: "SubmitRequest.Input", Rule: "give Input or a typed input, not both"}
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, false, &ValidationError{Field: "input", Value: reflect.TypeFor[In]().String(), Rule: "must encode as JSON: " + err.Error()}
	}
	req.Input = b
	return s.Submit(ctx, req)
}

// Result decodes the result of t, a completed task, into an Out. A task
// that has not completed gives ErrNotCompleted with its status (and its
// error, if it failed); a result that does not decode gives a
// *ResultError. An empty result decodes as JSON null (Out's zero value).
func Result[Out any](t *Task) (Out, error) {
	var out Out
	switch {
	case t == nil:
		return out, fmt.Errorf("%w: no task", ErrNotCompleted)
	case t.Status != Completed && t.Error != "":
		return out, fmt.Errorf("%w: %s is %s: %s", ErrNotCompleted, t.Ref(), t.Status, t.Error)
	case t.Status != Completed:
		return out, fmt.Errorf("%w: %s is %s", ErrNotCompleted, t.Ref(), t.Status)
	case len(t.Result) == 0:
		return out, nil
	}
	if err := json.Unmarshal(t.Result, &out); err != nil {
		return out, &ResultError{Ref: t.Ref(), GoType: reflect.TypeFor[Out]().String(), Err: err}
	}
	return out, nil
}
