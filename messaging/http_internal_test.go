package messaging

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/callpb"
)

// TestHTTPStatuses checks the status of every kind of Call error, as
// Client.run builds them, including those that match two kinds.
func TestHTTPStatuses(t *testing.T) {
	refusal := &entity.RefusedError{Reason: entity.RefusedNotAttached}
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{&TooLargeError{What: "request", Size: 2, Limit: 1}, 413, "too_large"},
		{&CallError{Code: callpb.Failure_CODE_UNKNOWN_TYPE}, 404, "unknown_type"},
		{&CallError{Code: callpb.Failure_CODE_BAD_INPUT}, 400, "bad_input"},
		{&CallError{Code: callpb.Failure_CODE_PANIC}, 500, "panic"},
		{&CallError{Code: callpb.Failure_CODE_HANDLER}, 500, "handler"},
		{&CallError{Code: callpb.Failure_CODE_DEADLINE_EXCEEDED}, 504, "deadline_exceeded"},
		{fmt.Errorf("gave up: %w: %w", refusal, context.DeadlineExceeded), 503, "refused"},
		{fmt.Errorf("gave up: %w: %w", ErrNoOwner, context.DeadlineExceeded), 503, "no_owner"},
		{fmt.Errorf("%w: waiting: %w", ErrOutcomeUnknown, context.DeadlineExceeded), 504, "deadline_exceeded"},
		{fmt.Errorf("%w: broken pipe", ErrOutcomeUnknown), 502, "outcome_unknown"},
	}
	for _, tc := range cases {
		w := httptest.NewRecorder()
		writeCallError(w, tc.err)
		if w.Code != tc.status || !strings.Contains(w.Body.String(), `"code":"`+tc.code+`"`) {
			t.Errorf("%v: %d %s; want %d with code %s", tc.err, w.Code, w.Body, tc.status, tc.code)
		}
	}
}
