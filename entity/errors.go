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

// Errors of a message (a call or a send) whose handler did not run to its
// end, told apart by whether it started: the caller may deliver a message
// that did not start again, and must not assume anything of one that did.
var (
	// ErrNotStarted is matched by the error of a message whose handler
	// never started: the caller's context ended while it waited for the
	// entity's turn, or the entity could not be activated (its state did
	// not load, its OnStart failed). Nothing of the message happened.
	ErrNotStarted = errors.New("entity: message not started")
	// ErrInterrupted is matched by the error of a message whose handler
	// started and was stopped before it returned: the caller's deadline or
	// cancellation (the error matches that context error too), or its
	// runner's detachment, loss of the shard or shutdown (the error then
	// matches no context error: it is not the caller's deadline). What the
	// handler did before it stopped stands: its outcome is unknown.
	ErrInterrupted = errors.New("entity: handler interrupted")
)

// isPanic reports whether err is (or wraps) a handler's panic. Its target
// is declared past the nil check: errors.As makes it escape, an
// allocation on every message otherwise.
func isPanic(err error) bool {
	if err == nil {
		return false
	}
	var p *PanicError
	return errors.As(err, &p)
}

// isApp reports whether err is (or wraps) an application error; see
// isPanic for why the nil check comes first.
func isApp(err error) bool {
	if err == nil {
		return false
	}
	var ae *AppError
	return errors.As(err, &ae)
}
