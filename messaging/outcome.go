package messaging

import (
	"context"
	"errors"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/messaging/internal/callpb"
)

// The outcome contract: every call that fails is exactly one of
//
//   - not applied (AppliedNo): the handler never started — refused by
//     every runner tried, never sent, no holder until the deadline, the
//     caller's deadline passed before the handler took its turn, the
//     entity could not be activated, or the request was rejected (unknown
//     type, bad input, too large). Nothing of the call happened;
//   - outcome unknown (AppliedUnknown): the handler may have run, in part
//     or whole — interrupted after it started (by the caller's deadline or
//     by its runner's detachment, lost shard or shutdown), the connection
//     lost after sending, the handler failed unexpectedly or panicked;
//   - an application error (AppliedYes, *entity.AppError): the handler ran
//     and answered with an error it meant.
//
// AppliedOf tells them apart and Retryable says which are worth sending
// again; the Client's own retry loop asks Retryable too.

// Applied says whether a call's handler ran, as far as its caller can know.
type Applied int

const (
	// AppliedUnknown: the handler may have run, in part or whole. Sending
	// the call again may apply it twice.
	AppliedUnknown Applied = iota
	// AppliedNo: the handler did not start; nothing of the call happened.
	AppliedNo
	// AppliedYes: the handler ran to its end; the reply (or application
	// error, or reply over the size limit) is its answer.
	AppliedYes
)

// String returns "no", "unknown" or "yes", the words of the HTTP answer's
// "applied" field.
func (a Applied) String() string {
	switch a {
	case AppliedNo:
		return "no"
	case AppliedYes:
		return "yes"
	}
	return "unknown"
}

// AppliedOf says whether the handler of the call that returned err ran:
// AppliedYes for a nil err (a reply) and an application error, AppliedNo
// for a call that provably never started, AppliedUnknown otherwise,
// including for errors this package did not make.
func AppliedOf(err error) Applied {
	if err == nil {
		return AppliedYes
	}
	var ce *CallError
	if errors.As(err, &ce) {
		return ce.Applied()
	}
	var tl *TooLargeError
	switch {
	case errors.Is(err, ErrOutcomeUnknown):
		return AppliedUnknown
	case errors.Is(err, entity.ErrRefused), errors.Is(err, ErrNoOwner), errors.Is(err, ErrNotSent), errors.Is(err, ErrClosed):
		return AppliedNo
	case errors.As(err, &tl):
		if tl.What == "request" {
			return AppliedNo
		}
		return AppliedYes
	}
	return AppliedUnknown
}

// Retryable reports whether the call that returned err may be sent again
// as it is: its handler did not start (AppliedNo) and what stopped it may
// pass — a refusal, a call not sent, no holder, the deadline before the
// handler's turn, an entity that could not be activated. A request the
// owner rejected (unknown type, bad input, too large) is not retryable,
// nor is any call that may have run.
func Retryable(err error) bool {
	if err == nil || AppliedOf(err) != AppliedNo {
		return false
	}
	var ce *CallError
	if errors.As(err, &ce) {
		switch ce.Code {
		case callpb.Failure_CODE_UNAVAILABLE, callpb.Failure_CODE_DEADLINE_EXCEEDED, callpb.Failure_CODE_CANCELLED:
			return true
		}
		return false
	}
	return errors.Is(err, entity.ErrRefused) || errors.Is(err, ErrNoOwner) || errors.Is(err, ErrNotSent)
}

// appliedOf is what a failure from an owner says of its handler. A
// receiver older than the applied field leaves it unset: it is then
// derived from the code, as unknown wherever the code allows both.
func appliedOf(f *callpb.Failure) Applied {
	switch f.Applied {
	case callpb.Failure_APPLIED_NO:
		return AppliedNo
	case callpb.Failure_APPLIED_UNKNOWN:
		return AppliedUnknown
	case callpb.Failure_APPLIED_YES:
		return AppliedYes
	}
	switch f.Code {
	case callpb.Failure_CODE_UNKNOWN_TYPE, callpb.Failure_CODE_BAD_INPUT, callpb.Failure_CODE_UNAVAILABLE,
		callpb.Failure_CODE_UNKNOWN_OPERATION, callpb.Failure_CODE_TYPE_NOT_HOSTED, callpb.Failure_CODE_STATE_CORRUPT:
		return AppliedNo
	case callpb.Failure_CODE_APPLICATION:
		return AppliedYes
	}
	return AppliedUnknown
}

// wireApplied is a's wire form.
func wireApplied(a Applied) callpb.Failure_Applied {
	switch a {
	case AppliedNo:
		return callpb.Failure_APPLIED_NO
	case AppliedYes:
		return callpb.Failure_APPLIED_YES
	}
	return callpb.Failure_APPLIED_UNKNOWN
}

// failureOf maps a host's error (other than a refusal) to the failure the
// caller sees: the same mapping for the local path and the server, so that
// where an entity lives never changes the error a caller gets. ctx is the
// caller's context as the host ran the call under it: a deadline or
// cancellation is reported only when it has ended, so that no other
// timeout (a handler's own, a detachment's) reads as the caller's.
func failureOf(ctx context.Context, typ string, err error) *callpb.Failure {
	f := &callpb.Failure{Code: callpb.Failure_CODE_HANDLER, Message: err.Error(), Applied: callpb.Failure_APPLIED_UNKNOWN}
	var (
		pe *entity.PanicError
		ae *entity.AppError
		tl *TooLargeError
	)
	switch {
	case errors.Is(err, entity.ErrNoHandler):
		f.Code, f.Applied = callpb.Failure_CODE_UNKNOWN_TYPE, callpb.Failure_APPLIED_NO
		f.Message = "no handler registered for entity type " + quote(typ)
	case errors.As(err, &ae):
		n := ae.Normalized()
		f.Code, f.Applied = callpb.Failure_CODE_APPLICATION, callpb.Failure_APPLIED_YES
		f.Message, f.AppCode, f.Details, f.Status = n.Message, n.Code, n.Details, int32(n.Status)
	case errors.Is(err, entity.ErrUnknownOp):
		// Before bad input, which it matches too: the caller needs to
		// know it named a wrong operation, and the message lists the
		// type's operations.
		f.Code, f.Applied = callpb.Failure_CODE_UNKNOWN_OPERATION, callpb.Failure_APPLIED_NO
	case errors.Is(err, entity.ErrBadInput), errors.Is(err, entity.ErrEmptyEntityID):
		f.Code, f.Applied = callpb.Failure_CODE_BAD_INPUT, callpb.Failure_APPLIED_NO
	case errors.As(err, &tl):
		f.Code, f.Applied = callpb.Failure_CODE_TOO_LARGE, callpb.Failure_APPLIED_YES
		if tl.What == "request" {
			f.Applied = callpb.Failure_APPLIED_NO
		}
	case errors.As(err, &pe):
		f.Code = callpb.Failure_CODE_PANIC
	case errors.Is(err, entity.ErrInterrupted):
		f.Code = callpb.Failure_CODE_INTERRUPTED
		if ctx.Err() != nil {
			f.Code = ctxCode(ctx)
		}
	case errors.Is(err, entity.ErrStateCorrupt):
		// Before not started, which it matches too: a corrupt state
		// fails every attempt until repaired, so it is not retried.
		f.Code, f.Applied = callpb.Failure_CODE_STATE_CORRUPT, callpb.Failure_APPLIED_NO
	case errors.Is(err, entity.ErrNotStarted):
		f.Code, f.Applied = callpb.Failure_CODE_UNAVAILABLE, callpb.Failure_APPLIED_NO
		if ctx.Err() != nil {
			f.Code = ctxCode(ctx)
		}
	case ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		// A Deliverer that says neither whether it started: the caller's
		// deadline did pass, and the outcome is unknown.
		f.Code = ctxCode(ctx)
	}
	return f
}

// ctxCode is the code of the caller's ended context.
func ctxCode(ctx context.Context) callpb.Failure_Code {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return callpb.Failure_CODE_DEADLINE_EXCEEDED
	}
	return callpb.Failure_CODE_CANCELLED
}
