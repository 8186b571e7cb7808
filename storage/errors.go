package storage

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors shared by every adapter. Adapters wrap them in *OpError;
// test with errors.Is.
var (
	// ErrNotFound reports that the key does not exist.
	ErrNotFound = errors.New("storage: not found")
	// ErrPrecondition reports that a conditional write lost: the key already
	// exists (create), or its ETag no longer matches or it vanished (replace).
	// S3's 412 PreconditionFailed and 409 ConditionalRequestConflict both map
	// here.
	ErrPrecondition = errors.New("storage: precondition failed")
	// ErrUnavailable reports that the backend could not be reached or did not
	// answer within the call's timeout, or answered with a server error.
	ErrUnavailable = errors.New("storage: unavailable")
	// ErrAccessDenied reports rejected credentials or missing permissions.
	ErrAccessDenied = errors.New("storage: access denied")
	// ErrNoBucket reports that the configured bucket does not exist.
	ErrNoBucket = errors.New("storage: bucket does not exist")
	// ErrCorrupt reports a stored record that cannot be decoded.
	ErrCorrupt = errors.New("storage: corrupt record")
	// ErrTooLarge reports an object larger than the adapter's read limit.
	ErrTooLarge = errors.New("storage: object too large")
	// ErrInvalid reports an argument the adapter refuses before any I/O.
	ErrInvalid = errors.New("storage: invalid argument")

	// ErrMetaMismatch reports that the stored cluster meta disagrees with the
	// caller's; see *MetaMismatchError for the field.
	ErrMetaMismatch = errors.New("storage: cluster meta mismatch")
	// ErrRunnerExists reports that a live runner already holds the id.
	ErrRunnerExists = errors.New("storage: runner id already registered")
	// ErrLeaseLost reports that the runner lease is gone (expired or revoked).
	ErrLeaseLost = errors.New("storage: lease lost")
	// ErrNotOwner reports that a shard lock is not held by this lease.
	ErrNotOwner = errors.New("storage: lock not held by this lease")
	// ErrSessionClosed reports use of a session after Close or Orphan.
	ErrSessionClosed = errors.New("storage: session closed")
)

// OpError is the error every adapter returns: what was attempted, on which
// key, against which endpoint, and why.
type OpError struct {
	Backend  string // "s3", "etcd", "s3coord" or "mem"
	Op       string // operation, e.g. "replace", "acquire", "keepalive"
	Key      string // the key as the backend sees it (with prefix); may be empty
	Endpoint string // endpoint(s) and bucket; may be empty
	Err      error  // wraps a sentinel above and, where there is one, the cause
}

func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString(e.Backend)
	b.WriteByte(' ')
	b.WriteString(e.Op)
	if e.Key != "" {
		b.WriteString(" ")
		b.WriteString(e.Key)
	}
	if e.Endpoint != "" {
		b.WriteString(" at ")
		b.WriteString(e.Endpoint)
	}
	b.WriteString(": ")
	if e.Err == nil {
		b.WriteString("<nil>")
	} else {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the wrapped error.
func (e *OpError) Unwrap() error { return e.Err }

// Wrap joins a sentinel kind with the underlying cause so that both match
// errors.Is and the message keeps the cause's detail. A nil cause yields kind.
func Wrap(kind, cause error) error {
	if cause == nil || errors.Is(cause, kind) {
		if cause == nil {
			return kind
		}
		return cause
	}
	return fmt.Errorf("%w: %w", kind, cause)
}

// MetaMismatchError names the cluster meta field that differs between the
// stored record and the caller's expectation.
type MetaMismatchError struct {
	Field  string // "shards", "groups" or "hash"
	Stored string
	Wanted string
}

func (e *MetaMismatchError) Error() string {
	return fmt.Sprintf("storage: cluster meta mismatch: %s is %s in the cluster but %s in this runner's config", e.Field, e.Stored, e.Wanted)
}

// Is reports ErrMetaMismatch.
func (e *MetaMismatchError) Is(target error) bool { return target == ErrMetaMismatch }

// IsRetryable reports whether err is worth retrying unchanged: the backend
// was unavailable. Precondition, not-found, corrupt and access errors are not.
func IsRetryable(err error) bool { return errors.Is(err, ErrUnavailable) }
