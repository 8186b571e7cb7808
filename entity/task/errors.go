package task

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Sentinel errors; test with errors.Is. The typed errors below wrap them and
// carry the detail (field, key, due time).
var (
	// ErrInvalid reports an argument refused before any I/O: a bad id, type,
	// entity, input, option or request field. *ValidationError names it.
	ErrInvalid = errors.New("task: invalid argument")
	// ErrInputTooLarge reports an input over the store's MaxInputSize; it
	// also matches ErrInvalid. *InputTooLargeError carries the sizes.
	ErrInputTooLarge = fmt.Errorf("%w: input too large", ErrInvalid)
	// ErrMalformedKey reports a pointer key, task key or task ref that does
	// not parse; *KeyError names it.
	ErrMalformedKey = errors.New("task: malformed key")
	// ErrNotFound reports that no task object exists under the key. It is
	// returned together with storage.ErrNotFound.
	ErrNotFound = errors.New("task: not found")
	// ErrExists reports that Create found a task object already there. It is
	// returned together with storage.ErrPrecondition.
	ErrExists = errors.New("task: already exists")
	// ErrCorrupt reports a task object that does not decode or decodes to an
	// invalid task. It wraps storage.ErrCorrupt, so both match.
	ErrCorrupt = fmt.Errorf("task: corrupt task object: %w", storage.ErrCorrupt)
	// ErrBadHint reports a wake-up hint whose body does not decode to the
	// task its pointer names (see Store.FromHint). It says nothing about the
	// task object: the reader falls back to reading it.
	ErrBadHint = errors.New("task: unusable wake-up hint")
	// ErrConflict reports a Submit whose caller-given id is already used by a
	// task with a different type, entity or input; *ConflictError names the
	// field.
	ErrConflict = errors.New("task: id already used by a different task")
	// ErrContention reports a compare-and-swap loop that kept losing to
	// concurrent writers; *ContentionError says how often it tried.
	ErrContention = errors.New("task: too many concurrent writers")

	// ErrNotDue refuses a claim before the task's available_at;
	// *TransitionError.Due carries the due time.
	ErrNotDue = errors.New("task: not due yet")
	// ErrTerminal refuses a change to a completed, failed or cancelled task.
	ErrTerminal = errors.New("task: task is terminal")
	// ErrCancelRequested refuses a claim or takeover of a task whose
	// cancellation was requested: the claimer should FinishCancel it instead.
	ErrCancelRequested = errors.New("task: cancellation requested")
	// ErrAttemptsExhausted refuses a claim or takeover of a task that has
	// used all its attempts: the claimer should Fail it instead.
	ErrAttemptsExhausted = errors.New("task: attempts exhausted")
	// ErrClaimed refuses a claim of a task running under a lease that has
	// not expired; *TransitionError.Due carries the lease's expiry.
	ErrClaimed = errors.New("task: claimed under a live lease")
	// ErrStaleEpoch refuses a claim or takeover with an epoch older than the
	// task's current claim: a newer shard owner's claim is never overridden.
	ErrStaleEpoch = errors.New("task: claim epoch is older than the current one")
	// ErrInvalidTransition refuses a transition the task's status does not
	// allow (completing a pending task, replaying a completed one, ...).
	ErrInvalidTransition = errors.New("task: transition not allowed")
	// ErrPurging refuses to replay a finished task that a retention purge
	// is deleting (Task.Purging is set): resubmit the work instead.
	ErrPurging = errors.New("task: task is being deleted by retention")
)

// ValidationError names the field an argument failed on.
type ValidationError struct {
	Field string // e.g. "id", "type", "input", "SubmitRequest.Delay"
	Value string // the rejected value, quoted or abbreviated
	Rule  string // what the value must satisfy
}

func (e *ValidationError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("task: invalid %s: %s", e.Field, e.Rule)
	}
	return fmt.Sprintf("task: invalid %s %s: %s", e.Field, e.Value, e.Rule)
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// InputTooLargeError reports an input over the limit.
type InputTooLargeError struct {
	Size  int // bytes given
	Limit int // the store's MaxInputSize
}

func (e *InputTooLargeError) Error() string {
	return fmt.Sprintf("task: input is %d bytes, over the limit of %d bytes (MaxInputSize)", e.Size, e.Limit)
}

// Unwrap makes errors.Is(err, ErrInputTooLarge) and errors.Is(err,
// ErrInvalid) hold.
func (e *InputTooLargeError) Unwrap() error { return ErrInputTooLarge }

// KeyError names a key or ref that does not parse.
type KeyError struct {
	Kind   string // "pointer key", "task key" or "task ref"
	Key    string
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("task: malformed %s %q: %s", e.Kind, e.Key, e.Reason)
}

// Unwrap makes errors.Is(err, ErrMalformedKey) hold.
func (e *KeyError) Unwrap() error { return ErrMalformedKey }

// CorruptError names a task object that cannot be used and says why.
type CorruptError struct {
	Key    string // the task key
	Reason string
	Err    error // the decoding or storage error, if any
}

func (e *CorruptError) Error() string {
	s := fmt.Sprintf("task: corrupt task object %s: %s", e.Key, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap makes errors.Is(err, ErrCorrupt) and errors.Is(err,
// storage.ErrCorrupt) hold, and keeps the cause in the chain.
func (e *CorruptError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrCorrupt}
	}
	return []error{ErrCorrupt, e.Err}
}

// ConflictError reports a caller-given id already used by a different task.
type ConflictError struct {
	Ref   string // the existing task
	Field string // the first field that differs: "type", "entity" or "input"
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("task: id of %s is already used by a task with a different %s", e.Ref, e.Field)
}

// Unwrap makes errors.Is(err, ErrConflict) hold.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// TransitionError reports a transition the task refused.
type TransitionError struct {
	Op     string // "claim", "takeover", "renew", "complete", "cancel", ...
	Ref    string // the task
	Status Status // its status when refused
	// Due is when the refusal may lift: the task's available_at for
	// ErrNotDue, the live lease's expiry for ErrClaimed; zero otherwise.
	Due    time.Time
	Err    error  // one of the transition sentinels
	Detail string // optional explanation
}

func (e *TransitionError) Error() string {
	s := fmt.Sprintf("task %s: %s refused (status %s): %v", e.Ref, e.Op, e.Status, e.Err)
	if !e.Due.IsZero() {
		s += " until " + e.Due.UTC().Format(time.RFC3339Nano)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel.
func (e *TransitionError) Unwrap() error { return e.Err }

// NotDueError refuses a claim before the task is due; Due is when it will
// be. It unwraps to the *TransitionError, and so matches ErrNotDue.
type NotDueError struct {
	*TransitionError
}

// Unwrap returns the *TransitionError.
func (e *NotDueError) Unwrap() error { return e.TransitionError }

// ContentionError reports a compare-and-swap loop that gave up.
type ContentionError struct {
	Op    string // "cancel", "replay"
	Ref   string
	Tries int
	Last  error // the last lost race
}

func (e *ContentionError) Error() string {
	return fmt.Sprintf("task %s: %s: lost %d compare-and-swap races to concurrent writers: %v", e.Ref, e.Op, e.Tries, e.Last)
}

// Unwrap makes errors.Is(err, ErrContention) hold and keeps the last
// storage.ErrPrecondition in the chain.
func (e *ContentionError) Unwrap() []error { return []error{ErrContention, e.Last} }
