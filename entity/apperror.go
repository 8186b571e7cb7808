package entity

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Well-known application error codes: an AppError with one of them is
// answered to an HTTP caller with the status next to it; any other code
// with 422 Unprocessable Entity, unless WithStatus says otherwise.
const (
	CodeInvalid      = "invalid"      // 400 Bad Request: the request is wrong
	CodeNotFound     = "not_found"    // 404 Not Found: what the request names does not exist
	CodeConflict     = "conflict"     // 409 Conflict: the entity's state forbids it now
	CodePrecondition = "precondition" // 412 Precondition Failed: a condition the caller set does not hold
	CodeRateLimited  = "rate_limited" // 429 Too Many Requests: try again later
)

// maxAppCodeBytes bounds an application error's code: it is a label for
// programs, not a message.
const maxAppCodeBytes = 64

// AppError is an error a handler returns to tell its caller what went
// wrong in the application's own terms: a code (e.g. "checked_out"), a
// message for people and optional JSON details. A caller gets it back as
// it was returned — a Go caller as an *AppError (errors.As), through the
// network too; an HTTP caller as a 4xx answer (422 unless the code or
// WithStatus says otherwise) with the code, message and details. It means
// the handler ran and decided: it is never retried, and counts as the
// "application" outcome in the call metrics.
//
// For a task, an AppError is an error like any other: retried with
// backoff unless wrapped in Permanent.
type AppError struct {
	// Code is the application's code: 1 to 64 bytes, e.g. "checked_out".
	// An empty one is sent as "error".
	Code string
	// Message says what went wrong, for people.
	Message string
	// Details is optional JSON for the caller (e.g. {"item": "sku-1"}).
	Details json.RawMessage
	// Status is the HTTP status for HTTP callers: 400, 404, 409, 412, 422
	// or 429; 0 derives it from Code (see the Code constants). Any other
	// value is answered as 422.
	Status int
}

// NewAppError returns an application error with code and message.
func NewAppError(code, message string) *AppError {
	return &AppError{Code: code, Message: message}
}

// WithDetails sets the error's details to v encoded as JSON and returns
// the error. A v that does not encode leaves the error without details and
// says why in its message, so that the answer still reaches the caller.
func (e *AppError) WithDetails(v any) *AppError {
	b, err := json.Marshal(v)
	if err != nil {
		e.Details = nil
		e.Message += fmt.Sprintf(" (details dropped: %v)", err)
		return e
	}
	e.Details = b
	return e
}

// WithStatus sets the HTTP status HTTP callers get (see Status) and
// returns the error.
func (e *AppError) WithStatus(status int) *AppError {
	e.Status = status
	return e
}

// Error names the code and the message.
func (e *AppError) Error() string {
	return fmt.Sprintf("%s: %s", e.code(), e.Message)
}

// code is the code sent: "error" when none was set, and at most
// maxAppCodeBytes.
func (e *AppError) code() string {
	switch {
	case e.Code == "":
		return "error"
	case len(e.Code) > maxAppCodeBytes:
		return e.Code[:maxAppCodeBytes]
	}
	return e.Code
}

// Normalized returns a copy of e as it travels to a caller: the code
// bounded (never empty), details that are not JSON dropped with a note in
// the message, and the HTTP status resolved.
func (e *AppError) Normalized() *AppError {
	n := &AppError{Code: e.code(), Message: e.Message, Details: e.Details, Status: e.HTTPStatus()}
	if len(n.Details) > 0 && !json.Valid(n.Details) {
		n.Details = nil
		n.Message += " (details dropped: not JSON)"
	}
	return n
}

// HTTPStatus is the status an HTTP caller gets for e: Status when it is
// one of 400, 404, 409, 412, 422 and 429, else the one its Code maps to,
// else 422.
func (e *AppError) HTTPStatus() int {
	switch e.Status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusPreconditionFailed,
		http.StatusUnprocessableEntity, http.StatusTooManyRequests:
		return e.Status
	}
	switch e.Code {
	case CodeInvalid:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodePrecondition:
		return http.StatusPreconditionFailed
	case CodeRateLimited:
		return http.StatusTooManyRequests
	}
	return http.StatusUnprocessableEntity
}
