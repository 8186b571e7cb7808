package entity

import (
	"errors"
	"fmt"
)

// permanentError marks a handler error as final: the task fails now
// instead of being retried.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a permanent failure: the task is failed at once,
// whatever attempts it has left. Any other error is retried with backoff.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err was marked by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// PanicError is the failure recorded for a handler that panicked; it counts
// as a failed attempt, retried like any other error.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("entity: handler panicked: %v", e.Value) }

// ErrNoHandler is reported for a task type no handler is registered for.
var ErrNoHandler = errors.New("entity: no handler registered for the task type")
