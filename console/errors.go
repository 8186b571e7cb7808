package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Error codes of the API's error answers ({"error": …, "code": …}).
const (
	CodeBadRequest   = "bad_request"   // a parameter or body is wrong; the message names it
	CodeUnauthorized = "unauthorized"  // no valid admin credential on a request that needs one
	CodeForbidden    = "forbidden"     // the runner has no admin credential configured
	CodeNotFound     = "not_found"     // no such endpoint, runner, task
	CodeConflict     = "conflict"      // refused by the state of things (a terminal task, a config refusal)
	CodeUnavailable  = "unavailable"   // a dependency did not answer (etcd, S3, the cluster not started)
	CodeNotAvailable = "not_available" // this runner does not offer the endpoint (not running yet)
	CodeTimeout      = "timeout"       // the request's time bound passed
	CodeInternal     = "internal"      // anything else
)

// Error is an API error: the HTTP status and code it is answered with,
// and the error, whose message names what was wrong. The dependencies
// (Deps) return one to choose the answer; any other error is answered by
// its kind (see answerOf).
type Error struct {
	Status int
	Code   string
	Err    error
}

// NewError returns an *Error answering err with status and code.
func NewError(status int, code string, err error) *Error {
	return &Error{Status: status, Code: code, Err: err}
}

// badRequest is a 400 naming the parameter or field.
func badRequest(field string, format string, args ...any) *Error {
	return NewError(http.StatusBadRequest, CodeBadRequest, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the error.
func (e *Error) Unwrap() error { return e.Err }

// ErrPeerAuth reports a runner refusing the serving runner's admin
// request (401/403): the runners do not share the admin credential.
var ErrPeerAuth = errors.New("the runner refused this runner's admin credential: give every runner the same admin.token")

// ErrNotRunning reports a dependency the runner has not made yet (it is
// starting) or has closed.
var ErrNotRunning = errors.New("console: the runner is not running")

// errorBody is the JSON of an error answer.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// answerOf returns the status and code err is answered with.
func answerOf(err error) (int, string) {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Status, e.Code
	case errors.Is(err, ErrNotRunning):
		return http.StatusServiceUnavailable, CodeNotAvailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, CodeTimeout
	}
	return http.StatusInternalServerError, CodeInternal
}

// writeError answers err as JSON.
func writeError(w http.ResponseWriter, err error) {
	status, code := answerOf(err)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tenure admin"`)
	}
	writeJSON(w, status, errorBody{Error: err.Error(), Code: code})
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorBody{Error: "console: encoding the answer: " + err.Error(), Code: CodeInternal})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
