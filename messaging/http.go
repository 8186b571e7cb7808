package messaging

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/messaging/internal/callpb"
)

// HTTPHandler serves calls from non-Go callers over plain HTTP + JSON,
// through c (so a request to any runner reaches the entity's owner):
//
//	POST /v1/entities/{type}/{id}              the type's default operation
//	POST /v1/entities/{type}/{id}/{op}         the operation op
//	POST /v1/entities/{type}/{id}[/{op}]?send=1  202 once the owner accepted it
//
// The body is the operation's JSON input; 200 answers with its reply. An
// optional ?timeout= (a Go duration, e.g. 500ms) bounds the call. An
// error is an ErrorBody {"error", "code", "applied"} (see httpAnswerOf for
// the statuses): 400 body not JSON, bad input or an operation name that
// is not one (bad_input), or an operation the type does not have
// (unknown_operation, its message listing the type's operations), 404
// unknown type (unknown_type) or a type no runner of the cluster hosts
// (type_not_hosted), 413 too large, 422 (or the status the application
// chose) an application error with its "app_code" and "details", 500
// handler error or panic, or the entity's durable state corrupt
// (state_corrupt: not started, and not retried), 502 interrupted by the owner's runner or
// outcome unknown, 503 with Retry-After for a call that never started
// (refused, no reachable holder or the deadline before the handler's
// turn, entity not activated), 504 the caller's deadline after delivery.
func HTTPHandler(c *Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/entities/{type}/{id}", func(w http.ResponseWriter, r *http.Request) {
		serveHTTP(c, w, r, "")
	})
	mux.HandleFunc("POST /v1/entities/{type}/{id}/{op}", func(w http.ResponseWriter, r *http.Request) {
		op := r.PathValue("op")
		err := task.ValidateOp(op)
		if err == nil && op == "" {
			err = errors.New("empty")
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_input", fmt.Sprintf("operation %q in the path of %s: %v", op, r.URL.Path, err))
			return
		}
		serveHTTP(c, w, r, op)
	})
	return mux
}

func serveHTTP(c *Client, w http.ResponseWriter, r *http.Request, op string) {
	typ, id := r.PathValue("type"), r.PathValue("id")
	ctx := r.Context()
	if s := r.URL.Query().Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			writeError(w, http.StatusBadRequest, "bad_input", fmt.Sprintf("timeout %q: want a positive Go duration such as 500ms", s))
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	limit := c.cfg.MaxMessageBytes
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	switch {
	case err != nil:
		writeError(w, http.StatusBadRequest, "bad_input", fmt.Sprintf("reading the body: %v", err))
		return
	case len(body) > limit:
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body over the %d-byte limit (MaxMessageBytes)", limit))
		return
	case !json.Valid(body):
		writeError(w, http.StatusBadRequest, "bad_input", fmt.Sprintf("body of %d bytes is not JSON: a call's body is the entity's JSON input", len(body)))
		return
	}
	m := &entity.Message{Type: typ, ID: id, Op: op, Body: body}
	if s := r.URL.Query().Get("send"); s == "1" || s == "true" {
		m.OneWay = true
		if _, err := c.Invoke(ctx, m); err != nil {
			writeCallError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "{}\n")
		return
	}
	reply, err := c.Invoke(ctx, m)
	if err != nil {
		writeCallError(w, err)
		return
	}
	if len(reply) == 0 {
		reply = []byte("null")
	}
	if json.Valid(reply) {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	w.WriteHeader(http.StatusOK)
	w.Write(reply)
}

// WriteError answers an HTTP request with a call's error as the entity
// endpoint does (see HTTPHandler for the statuses): the status its kind
// has, Retry-After when sending it again is safe, and an ErrorBody with
// the application's code and details for an *entity.AppError. A service's
// own HTTP front uses it for the errors of its calls.
func WriteError(w http.ResponseWriter, err error) { writeCallError(w, err) }

// writeCallError answers a Call's error: its status and code (see
// httpAnswerOf), whether the handler ran, and Retry-After when it did not
// and trying again may pass.
func writeCallError(w http.ResponseWriter, err error) {
	a := httpAnswerOf(err)
	if a.applied == AppliedNo && Retryable(err) {
		w.Header().Set("Retry-After", "1")
	}
	body := ErrorBody{Error: err.Error(), Code: a.code, Applied: a.applied.String()}
	var ae *entity.AppError
	if errors.As(err, &ae) {
		n := ae.Normalized()
		body.Error, body.AppCode, body.Details = n.Message, n.Code, n.Details
	}
	writeBody(w, a.status, body)
}

// httpAnswer is a call error's HTTP status and code.
type httpAnswer struct {
	status  int
	code    string
	applied Applied
}

// httpAnswerOf maps a Call's error to its answer. 503 (with Retry-After)
// answers only calls whose handler never started and may start if sent
// again; a deadline error (504) only a deadline of the caller's that
// passed after the call was delivered. The order matters where an error
// matches two (a refusal at the deadline is a 503).
func httpAnswerOf(err error) httpAnswer {
	applied := AppliedOf(err)
	a := func(status int, code string) httpAnswer { return httpAnswer{status, code, applied} }
	var (
		ae *entity.AppError
		ce *CallError
	)
	isCode := func(c Code) bool { return errors.As(err, &ce) && ce.Code == c }
	switch {
	case errors.As(err, &ae):
		return a(ae.HTTPStatus(), "application")
	case errors.Is(err, ErrTooLarge):
		return a(http.StatusRequestEntityTooLarge, "too_large")
	case errors.Is(err, ErrUnknownType):
		return a(http.StatusNotFound, "unknown_type")
	case errors.Is(err, ErrTypeNotHosted):
		return a(http.StatusNotFound, "type_not_hosted")
	case errors.Is(err, entity.ErrStateCorrupt):
		// Before unavailable: not started either, but sending it again
		// fails the same way until the object is repaired.
		return a(http.StatusInternalServerError, "state_corrupt")
	case errors.Is(err, ErrUnknownOp):
		// Before bad input, which it matches too.
		return a(http.StatusBadRequest, "unknown_operation")
	case errors.Is(err, ErrBadInput):
		return a(http.StatusBadRequest, "bad_input")
	case errors.Is(err, ErrPanicked):
		return a(http.StatusInternalServerError, "panic")
	case errors.Is(err, ErrHandler):
		return a(http.StatusInternalServerError, "handler")
	case errors.Is(err, entity.ErrRefused):
		return a(http.StatusServiceUnavailable, "refused")
	case errors.Is(err, ErrNoOwner):
		return a(http.StatusServiceUnavailable, "no_owner")
	case isCode(callpb.Failure_CODE_UNAVAILABLE):
		return a(http.StatusServiceUnavailable, "unavailable")
	case isCode(callpb.Failure_CODE_INTERRUPTED):
		return a(http.StatusBadGateway, "interrupted")
	case applied == AppliedNo && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		// The caller's deadline passed before the handler's turn.
		return a(http.StatusServiceUnavailable, "not_started")
	case errors.Is(err, context.DeadlineExceeded):
		return a(http.StatusGatewayTimeout, "deadline_exceeded")
	case errors.Is(err, ErrOutcomeUnknown):
		return a(http.StatusBadGateway, "outcome_unknown")
	case errors.Is(err, context.Canceled):
		return a(http.StatusBadGateway, "cancelled")
	case errors.Is(err, ErrClosed):
		return a(http.StatusServiceUnavailable, "closed")
	}
	return a(http.StatusInternalServerError, "error")
}

// ErrorBody is the JSON body of every error answer of HTTPHandler.
type ErrorBody struct {
	// Error says what happened, for people (an application error's
	// message).
	Error string `json:"error"`
	// Code is the kind of error: bad_input, unknown_operation,
	// unknown_type, type_not_hosted, too_large,
	// application, handler, panic, refused, no_owner, unavailable,
	// not_started, interrupted, outcome_unknown, deadline_exceeded,
	// cancelled, closed, error.
	Code string `json:"code"`
	// Applied says whether the handler ran: "no" (it never started: safe
	// to send again), "unknown" (it may have run) or "yes" (it ran: an
	// application error is its answer).
	Applied string `json:"applied"`
	// AppCode and Details are an application error's own code and JSON
	// details.
	AppCode string          `json:"app_code,omitempty"`
	Details json.RawMessage `json:"details,omitempty"`
}

// writeError answers a request refused before any call was made: nothing
// was applied.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeBody(w, status, ErrorBody{Error: msg, Code: code, Applied: AppliedNo.String()})
}

func writeBody(w http.ResponseWriter, status int, body ErrorBody) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}
