package messaging

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/messaging/internal/callpb"
)

// quote is typ quoted, for messages.
func quote(s string) string { return strconv.Quote(s) }

var (
	// ErrOutcomeUnknown is returned when the request may have reached the
	// owner but no reply came back (the connection broke after sending):
	// the handler may or may not have run. It is never retried.
	ErrOutcomeUnknown = errors.New("messaging: call outcome unknown")
	// ErrUnknownType is matched by a *CallError whose entity type has no
	// handler on the owner.
	ErrUnknownType = errors.New("messaging: unknown entity type")
	// ErrBadInput is matched by a *CallError for a request the owner
	// rejected as malformed; such an error also matches entity.ErrBadInput.
	ErrBadInput = errors.New("messaging: bad input")
	// ErrUnknownOp is matched by a *CallError whose entity type has no
	// operation of the name the call gave (or no default operation); such
	// an error also matches entity.ErrUnknownOp, ErrBadInput and
	// entity.ErrBadInput, and its message lists the type's operations.
	ErrUnknownOp = errors.New("messaging: unknown operation")
	// ErrTypeNotHosted is matched by a *CallError for a call of an entity
	// type no runner hosts: every runner in the routing view advertises
	// the types it hosts (storage.RunnerInfo.Types), none lists it, and
	// none ever did while the view was watched. It fails at once, never
	// sent; the type's runners are not deployed (or not yet registered).
	ErrTypeNotHosted = errors.New("messaging: entity type not hosted")
	// ErrPanicked is matched by a *CallError for a handler that panicked.
	ErrPanicked = errors.New("messaging: handler panicked")
	// ErrHandler is matched by a *CallError for a handler that returned an
	// error.
	ErrHandler = errors.New("messaging: handler failed")
	// ErrTooLarge is matched by a *TooLargeError and by a *CallError for a
	// message over a size limit.
	ErrTooLarge = errors.New("messaging: message too large")
	// ErrNoOwner is matched by the error of a call that ended (its
	// deadline) while no runner held the entity's shard, or while the
	// holder could not be reached: the request was never sent.
	ErrNoOwner = errors.New("messaging: no reachable owner for the shard")
	// ErrClosed is returned by a Client after Close.
	ErrClosed = errors.New("messaging: client closed")
	// ErrNotSent is matched by the error of an attempt whose request
	// provably never reached a runner (no connection, or one the runner
	// had closed before the request was written). The Client sends such a
	// call again; at its deadline the error matches ErrNoOwner.
	ErrNotSent = errors.New("messaging: request not sent")
)

// Code is the kind of a failure, as the owner reported it.
type Code = callpb.Failure_Code

// CallError is a failure of a call as its owner reported it: the handler
// did not start (unknown type, bad input, the deadline before its turn,
// the entity not activated), ran and failed (an application error, an
// unexpected error, a panic), or was interrupted. Applied says which. It
// matches the sentinel of its Code through errors.Is (CODE_DEADLINE_EXCEEDED
// and CODE_CANCELLED match the context errors, and entity.ErrNotStarted or
// entity.ErrInterrupted as Applied says; CODE_INTERRUPTED matches
// entity.ErrInterrupted and no context error), and an application error
// unwraps to its *entity.AppError.
type CallError struct {
	Type, ID string
	Code     Code
	Message  string
	// App is the handler's application error, for CODE_APPLICATION.
	App *entity.AppError

	applied Applied
}

// Applied says whether the handler ran.
func (e *CallError) Applied() Applied { return e.applied }

// Unwrap returns the application error, if any.
func (e *CallError) Unwrap() error {
	if e.App != nil {
		return e.App
	}
	return nil
}

// Error names the entity, the code and the owner's message.
func (e *CallError) Error() string {
	if e.App != nil {
		return fmt.Sprintf("messaging: call %s/%s: application error %s", e.Type, e.ID, e.App.Error())
	}
	return fmt.Sprintf("messaging: call %s/%s: %s: %s", e.Type, e.ID, codeText(e.Code), e.Message)
}

// codeText is a code in words, for messages people read.
func codeText(c Code) string {
	switch c {
	case callpb.Failure_CODE_UNKNOWN_TYPE:
		return "unknown entity type"
	case callpb.Failure_CODE_BAD_INPUT:
		return "bad input"
	case callpb.Failure_CODE_PANIC:
		return "handler panicked"
	case callpb.Failure_CODE_HANDLER:
		return "handler failed"
	case callpb.Failure_CODE_DEADLINE_EXCEEDED:
		return "deadline exceeded"
	case callpb.Failure_CODE_CANCELLED:
		return "cancelled"
	case callpb.Failure_CODE_TOO_LARGE:
		return "too large"
	case callpb.Failure_CODE_INTERRUPTED:
		return "interrupted"
	case callpb.Failure_CODE_APPLICATION:
		return "application error"
	case callpb.Failure_CODE_UNAVAILABLE:
		return "entity not activated"
	case callpb.Failure_CODE_UNKNOWN_OPERATION:
		return "unknown operation"
	case callpb.Failure_CODE_TYPE_NOT_HOSTED:
		return "entity type not hosted"
	case callpb.Failure_CODE_STATE_CORRUPT:
		return "entity state corrupt"
	}
	return c.String()
}

// Is matches the sentinel of e's code.
func (e *CallError) Is(target error) bool {
	switch e.Code {
	case callpb.Failure_CODE_UNKNOWN_TYPE:
		return target == ErrUnknownType
	case callpb.Failure_CODE_BAD_INPUT:
		return target == ErrBadInput || target == entity.ErrBadInput
	case callpb.Failure_CODE_PANIC:
		return target == ErrPanicked
	case callpb.Failure_CODE_HANDLER:
		return target == ErrHandler
	case callpb.Failure_CODE_DEADLINE_EXCEEDED:
		return target == context.DeadlineExceeded || e.startedIs(target)
	case callpb.Failure_CODE_CANCELLED:
		return target == context.Canceled || e.startedIs(target)
	case callpb.Failure_CODE_TOO_LARGE:
		return target == ErrTooLarge
	case callpb.Failure_CODE_INTERRUPTED:
		return target == entity.ErrInterrupted
	case callpb.Failure_CODE_UNAVAILABLE:
		return target == entity.ErrNotStarted
	case callpb.Failure_CODE_UNKNOWN_OPERATION:
		return target == ErrUnknownOp || target == entity.ErrUnknownOp || target == ErrBadInput || target == entity.ErrBadInput
	case callpb.Failure_CODE_TYPE_NOT_HOSTED:
		return target == ErrTypeNotHosted
	case callpb.Failure_CODE_STATE_CORRUPT:
		return target == entity.ErrStateCorrupt || target == entity.ErrNotStarted
	}
	return false
}

// startedIs matches the entity sentinel of a deadline or cancellation:
// before the handler started, or after.
func (e *CallError) startedIs(target error) bool {
	if e.applied == AppliedNo {
		return target == entity.ErrNotStarted
	}
	return target == entity.ErrInterrupted
}

// TooLargeError reports a message over the size limit, refused before it
// was sent (a request) or before it was returned (a reply).
type TooLargeError struct {
	What  string // "request" or "reply"
	Size  int
	Limit int
}

// Error names the size and the limit.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("messaging: %s of %d bytes is over the %d-byte limit (MaxMessageBytes)", e.What, e.Size, e.Limit)
}

// Is matches ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// badInput is the failure for a request that names no entity properly.
func badInput(format string, args ...any) *callpb.Failure {
	return &callpb.Failure{Code: callpb.Failure_CODE_BAD_INPUT, Message: fmt.Sprintf(format, args...)}
}

// checkNames validates what a request must name; the message names the
// field.
func checkNames(typ, id, group, op string) *callpb.Failure {
	switch {
	case typ == "":
		return badInput("entity type is empty")
	case id == "":
		return badInput("entity id is empty (type %q)", typ)
	case group == "":
		return badInput("shard group is empty (entity %s/%s)", typ, id)
	case len(typ) > maxNameBytes:
		return badInput("entity type of %d bytes is over %d", len(typ), maxNameBytes)
	case len(id) > maxNameBytes:
		return badInput("entity id of %d bytes is over %d (type %q)", len(id), maxNameBytes, typ)
	}
	if err := task.ValidateOp(op); err != nil {
		return badInput("entity %s/%s: %v", typ, id, err)
	}
	return nil
}

// maxNameBytes bounds a type or id: they are keys, not payloads.
const maxNameBytes = 1024

// refusalOf is the wire form of a host's refusal.
func refusalOf(r *entity.RefusedError) *callpb.Refusal {
	reason := callpb.Refusal_REASON_UNSPECIFIED
	switch r.Reason {
	case entity.RefusedNotOwner:
		reason = callpb.Refusal_REASON_NOT_OWNER
	case entity.RefusedNotAttached:
		reason = callpb.Refusal_REASON_NOT_ATTACHED
	case entity.RefusedShardMoving:
		reason = callpb.Refusal_REASON_SHARD_MOVING
	}
	return &callpb.Refusal{Reason: reason, HeldEpoch: r.Epoch}
}

// reasonLabel is a refusal's reason as a metric label.
func reasonLabel(r callpb.Refusal_Reason) string {
	switch r {
	case callpb.Refusal_REASON_NOT_OWNER:
		return string(entity.RefusedNotOwner)
	case callpb.Refusal_REASON_NOT_ATTACHED:
		return string(entity.RefusedNotAttached)
	case callpb.Refusal_REASON_SHARD_MOVING:
		return string(entity.RefusedShardMoving)
	}
	return "refused"
}
