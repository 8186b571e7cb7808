package detachment

import (
	"errors"
	"fmt"
	"time"
)

// Reason says why the runner is (or would be) detached. It is meant as a
// metric label: the set of values is small and fixed.
type Reason string

const (
	// ReasonStarting: no keep-alive has been confirmed yet.
	ReasonStarting Reason = "starting"
	// ReasonLeaseDeadline: the clock reached lease deadline - DetachMargin
	// without a keep-alive pushing the deadline further.
	ReasonLeaseDeadline Reason = "lease-deadline"
	// ReasonKeepAliveFailures: KeepAliveFailureThreshold keep-alives failed
	// in a row.
	ReasonKeepAliveFailures Reason = "keepalive-failures"
	// ReasonStorageError: a storage error was not followed by a successful
	// storage call within StorageErrorGrace.
	ReasonStorageError Reason = "storage-error"
	// ReasonLeaseLost: etcd reported the lease gone (TTL ≤ 0, lease not
	// found), or the runner moved to a new lease while attached.
	ReasonLeaseLost Reason = "lease-lost"
	// ReasonStopped: the runner is shutting down (Detach(ReasonStopped) or
	// Close). Final: the machine never re-attaches.
	ReasonStopped Reason = "stopped"
	// ReasonExplicit: Detach was called with an empty reason.
	ReasonExplicit Reason = "explicit"
)

// TransitionKind is what a Transition reports.
type TransitionKind int

const (
	// Attached: the runner attached; a new attachment context (Generation)
	// is live.
	Attached TransitionKind = iota + 1
	// Detached: the runner detached; the attachment context of Generation
	// was cancelled before the transition was delivered.
	Detached
	// WouldDetach: observe mode only. Enforce mode would have detached now,
	// for Reason; nothing was interrupted.
	WouldDetach
	// WouldAttach: observe mode only. Enforce mode would have re-attached
	// now.
	WouldAttach
)

// String returns the kind as a lower-case word, fit for logs and labels.
func (k TransitionKind) String() string {
	switch k {
	case Attached:
		return "attached"
	case Detached:
		return "detached"
	case WouldDetach:
		return "would-detach"
	case WouldAttach:
		return "would-attach"
	default:
		return fmt.Sprintf("TransitionKind(%d)", int(k))
	}
}

// Transition is one change of the runner's attachment, with what metrics and
// logs need to report it.
type Transition struct {
	Kind TransitionKind
	// Reason: for Detached and WouldDetach, why; for Attached and
	// WouldAttach, the reason of the detachment that ends.
	Reason Reason
	// Err is the input error that triggered a Detached or WouldDetach, when
	// there was one (the last keep-alive or storage error); nil otherwise.
	Err error
	// At is the time of the decision on the machine's clock.
	At time.Time
	// Deadline is the lease deadline known at At (zero before the first
	// keep-alive); Deadline - At is the lease deadline lag.
	Deadline time.Time
	// Generation is the attachment generation: for Attached the new one, for
	// Detached the one that ended, for the observe kinds the current one.
	Generation uint64
	LeaseID    int64 // the current lease (0 before the first keep-alive)
	Mode       Mode  // the mode in force when the transition happened
	Streak     int   // consecutive keep-alive failures at At
}

// ErrDetached is wrapped by the cause of every cancelled attachment context:
// errors.Is(context.Cause(ctx), ErrDetached) tells a detachment apart from
// another cancellation.
var ErrDetached = errors.New("detachment: runner detached")

// DetachedError is the context.Cause of a cancelled attachment context.
type DetachedError struct {
	Reason     Reason
	Generation uint64    // the attachment that ended (0: never attached)
	At         time.Time // when it ended
	Err        error     // the input error that triggered it, if any
}

func (e *DetachedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("detachment: runner detached (%s, generation %d): %v", e.Reason, e.Generation, e.Err)
	}
	return fmt.Sprintf("detachment: runner detached (%s, generation %d)", e.Reason, e.Generation)
}

// Unwrap returns ErrDetached and the triggering error, so errors.Is matches
// both.
func (e *DetachedError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrDetached, e.Err}
	}
	return []error{ErrDetached}
}
