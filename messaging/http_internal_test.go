package messaging

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/messaging/internal/callpb"
)

// TestHTTPStatuses checks the answer to every kind of Call error, as
// Client.run builds them, including those that match two kinds: status,
// code, applied, and Retry-After on exactly the 503s.
func TestHTTPStatuses(t *testing.T) {
	refusal := &entity.RefusedError{Reason: entity.RefusedNotAttached}
	ce := func(code Code, applied Applied) *CallError { return &CallError{Code: code, applied: applied} }
	app := &CallError{Code: callpb.Failure_CODE_APPLICATION, applied: AppliedYes,
		App: &entity.AppError{Code: "checked_out", Message: "cart is checked out", Details: json.RawMessage(`{"cart":"c1"}`)}}
	conflict := &CallError{Code: callpb.Failure_CODE_APPLICATION, applied: AppliedYes, App: entity.NewAppError(entity.CodeConflict, "busy")}
	cases := []struct {
		err     error
		status  int
		code    string
		applied string
	}{
		{&TooLargeError{What: "request", Size: 2, Limit: 1}, 413, "too_large", "no"},
		{ce(callpb.Failure_CODE_TOO_LARGE, AppliedYes), 413, "too_large", "yes"},
		{ce(callpb.Failure_CODE_UNKNOWN_TYPE, AppliedNo), 404, "unknown_type", "no"},
		{ce(callpb.Failure_CODE_BAD_INPUT, AppliedNo), 400, "bad_input", "no"},
		{ce(callpb.Failure_CODE_UNKNOWN_OPERATION, AppliedNo), 400, "unknown_operation", "no"},
		{ce(callpb.Failure_CODE_TYPE_NOT_HOSTED, AppliedNo), 404, "type_not_hosted", "no"},
		{ce(callpb.Failure_CODE_PANIC, AppliedUnknown), 500, "panic", "unknown"},
		{ce(callpb.Failure_CODE_HANDLER, AppliedUnknown), 500, "handler", "unknown"},
		{app, 422, "application", "yes"},
		{conflict, 409, "application", "yes"},
		{ce(callpb.Failure_CODE_INTERRUPTED, AppliedUnknown), 502, "interrupted", "unknown"},
		{ce(callpb.Failure_CODE_STATE_CORRUPT, AppliedNo), 500, "state_corrupt", "no"},
		{ce(callpb.Failure_CODE_UNAVAILABLE, AppliedNo), 503, "unavailable", "no"},
		{ce(callpb.Failure_CODE_DEADLINE_EXCEEDED, AppliedNo), 503, "not_started", "no"},
		{ce(callpb.Failure_CODE_DEADLINE_EXCEEDED, AppliedUnknown), 504, "deadline_exceeded", "unknown"},
		{ce(callpb.Failure_CODE_CANCELLED, AppliedUnknown), 502, "cancelled", "unknown"},
		{fmt.Errorf("gave up: %w: %w", refusal, context.DeadlineExceeded), 503, "refused", "no"},
		{fmt.Errorf("gave up: %w: %w", ErrNoOwner, context.DeadlineExceeded), 503, "no_owner", "no"},
		{fmt.Errorf("%w: waiting: %w", ErrOutcomeUnknown, context.DeadlineExceeded), 504, "deadline_exceeded", "unknown"},
		{fmt.Errorf("%w: broken pipe", ErrOutcomeUnknown), 502, "outcome_unknown", "unknown"},
		{ErrClosed, 503, "closed", "no"},
	}
	for _, tc := range cases {
		w := httptest.NewRecorder()
		writeCallError(w, tc.err)
		var body ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: body %s: %v", tc.err, w.Body, err)
		}
		if w.Code != tc.status || body.Code != tc.code || body.Applied != tc.applied {
			t.Errorf("%v: %d %s; want %d with code %s, applied %s", tc.err, w.Code, w.Body, tc.status, tc.code, tc.applied)
		}
		retryAfter := w.Header().Get("Retry-After") != ""
		if want := tc.status == 503 && tc.code != "closed"; retryAfter != want {
			t.Errorf("%v: Retry-After %q; want one: %v", tc.err, w.Header().Get("Retry-After"), want)
		}
		if tc.err == app && (body.AppCode != "checked_out" || string(body.Details) != `{"cart":"c1"}` || body.Error != "cart is checked out") {
			t.Errorf("application error body %s; want its app_code, details and message", w.Body)
		}
	}
}
