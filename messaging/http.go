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
)

// HTTPHandler serves calls from non-Go callers over plain HTTP + JSON,
// through c (so a request to any runner reaches the entity's owner):
//
//	POST /v1/entities/{type}/{id}         body: JSON; 200 with the reply
//	POST /v1/entities/{type}/{id}?send=1  202 once the owner accepted it
//
// An optional ?timeout= (a Go duration, e.g. 500ms) bounds the call. An
// error is a JSON object {"error": message, "code": code} with status: 400
// body not JSON or bad input, 404 unknown type, 413 too large, 500 handler
// error or panic, 502 outcome unknown, 503 refused or unreachable until the
// deadline, 504 deadline exceeded.
func HTTPHandler(c *Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/entities/{type}/{id}", func(w http.ResponseWriter, r *http.Request) {
		serveHTTP(c, w, r)
	})
	return mux
}

func serveHTTP(c *Client, w http.ResponseWriter, r *http.Request) {
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
	if s := r.URL.Query().Get("send"); s == "1" || s == "true" {
		if err := c.Send(ctx, typ, id, body); err != nil {
			writeCallError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "{}\n")
		return
	}
	reply, err := c.Call(ctx, typ, id, body)
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

// writeCallError maps a Call's error to its status; the order matters
// where an error matches two (a refusal at the deadline is a 503).
func writeCallError(w http.ResponseWriter, err error) {
	status, code := http.StatusInternalServerError, "error"
	switch {
	case errors.Is(err, ErrTooLarge):
		status, code = http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, ErrUnknownType):
		status, code = http.StatusNotFound, "unknown_type"
	case errors.Is(err, ErrBadInput):
		status, code = http.StatusBadRequest, "bad_input"
	case errors.Is(err, ErrPanicked):
		code = "panic"
	case errors.Is(err, ErrHandler):
		code = "handler"
	case errors.Is(err, entity.ErrRefused):
		status, code = http.StatusServiceUnavailable, "refused"
	case errors.Is(err, ErrNoOwner):
		status, code = http.StatusServiceUnavailable, "no_owner"
	case errors.Is(err, context.DeadlineExceeded):
		status, code = http.StatusGatewayTimeout, "deadline_exceeded"
	case errors.Is(err, ErrOutcomeUnknown):
		status, code = http.StatusBadGateway, "outcome_unknown"
	case errors.Is(err, context.Canceled):
		status, code = http.StatusServiceUnavailable, "cancelled"
	}
	writeError(w, status, code, err.Error())
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, code})
}
