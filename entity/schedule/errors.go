package schedule

import (
	"errors"
	"fmt"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrExists reports a Create whose name is taken in the group.
	ErrExists = errors.New("schedule: already exists")
	// ErrNotFound reports a schedule that does not exist (or was deleted).
	ErrNotFound = errors.New("schedule: not found")
	// ErrInvalid reports a spec or argument refused before any I/O; see
	// *ValidationError for the field.
	ErrInvalid = errors.New("schedule: invalid")
	// ErrCorrupt reports a schedule object that cannot be decoded.
	ErrCorrupt = errors.New("schedule: corrupt object")
	// ErrContention reports a compare-and-swap that kept losing to
	// concurrent writers.
	ErrContention = errors.New("schedule: too much contention")
)

// ValidationError names the field of a spec (or option) that was refused
// and why. It wraps ErrInvalid, and the task package's error when the rule
// is the task package's (names, types, entities, input size).
type ValidationError struct {
	Field string // "name", "cron", "tz", "type", "entity", "input", "catch_up", …
	Value string // the refused value, quoted and abbreviated; may be empty
	Rule  string // what the value breaks
	Err   error  // the underlying error, if any
}

func (e *ValidationError) Error() string {
	msg := "schedule: " + e.Field
	if e.Value != "" {
		msg += " " + e.Value
	}
	if e.Rule != "" {
		msg += ": " + e.Rule
	}
	return msg
}

// Unwrap returns ErrInvalid and the underlying error.
func (e *ValidationError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.Err}
}

// CorruptError reports a schedule object that does not decode or
// validate; it wraps ErrCorrupt and the cause.
type CorruptError struct {
	Key string
	Err error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("schedule: object %s is corrupt (delete it with `tenure schedule delete` and create it again): %v", e.Key, e.Err)
}

// Unwrap returns ErrCorrupt and the cause.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }
