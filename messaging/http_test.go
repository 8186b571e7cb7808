package messaging_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/messaging"
)

func TestHTTPHandler(t *testing.T) {
	testenv.CheckLeaks(t)
	b := &fake{name: "b", fn: func(ctx context.Context, d entity.Delivery) ([]byte, error) {
		switch d.ID {
		case "slow":
			<-ctx.Done()
			return nil, ctx.Err()
		case "fails":
			return nil, &entity.PanicError{Value: "boom"}
		case "checked-out":
			return nil, entity.NewAppError("checked_out", "cart is checked out").WithDetails(map[string]int{"items": 3})
		case "busy":
			return nil, entity.NewAppError(entity.CodeConflict, "try later")
		case "stopped":
			return nil, fmt.Errorf("%w by its runner: detached", entity.ErrInterrupted)
		}
		if d.Type == "nope" {
			return nil, fmt.Errorf("%w: %q", entity.ErrNoHandler, d.Type)
		}
		return []byte(fmt.Sprintf(`{"got":%s,"one_way":%v}`, d.Body, d.OneWay)), nil
	}}
	v := newView()
	v.runner("b", serve(t, b))
	v.lock("b", 5)
	c, _ := v.client(t)
	hs := httptest.NewServer(messaging.HTTPHandler(c))
	defer hs.Close()

	cases := []struct {
		name, path, body string
		status           int
		want             string // substring of the response body
	}{
		{"reply", "/v1/entities/echo/e1", `{"x":1}`, 200, `{"got":{"x":1},"one_way":false}`},
		{"send", "/v1/entities/echo/e1?send=1", `{"x":2}`, 202, `{}`},
		{"not json", "/v1/entities/echo/e1", `x=1`, 400, `"code":"bad_input"`},
		{"unknown type", "/v1/entities/nope/e1", `{}`, 404, `entity type \"nope\"`},
		{"panic", "/v1/entities/echo/fails", `{}`, 500, `"code":"panic"`},
		{"application", "/v1/entities/echo/checked-out", `{}`, 422,
			`{"error":"cart is checked out","code":"application","applied":"yes","app_code":"checked_out","details":{"items":3}}`},
		{"application 409", "/v1/entities/echo/busy", `{}`, 409, `"app_code":"conflict"`},
		{"interrupted", "/v1/entities/echo/stopped", `{}`, 502, `"code":"interrupted","applied":"unknown"`},
		{"timeout", "/v1/entities/echo/slow?timeout=50ms", `{}`, 504, `"code":"deadline_exceeded"`},
		{"bad timeout", "/v1/entities/echo/e1?timeout=soon", `{}`, 400, `timeout \"soon\"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(hs.URL+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(got), tc.want) {
				t.Fatalf("POST %s: %d %s; want %d containing %s", tc.path, resp.StatusCode, got, tc.status, tc.want)
			}
			if resp.StatusCode >= 400 {
				var e struct{ Error, Code, Applied string }
				if err := json.Unmarshal(got, &e); err != nil || e.Error == "" || e.Code == "" || e.Applied == "" {
					t.Fatalf("error body %s is not {error, code, applied}: %v", got, err)
				}
			}
		})
	}
	// Delivered: reply, send, unknown type, panic, the application
	// errors, the interruption, timeout; the bad requests never left the
	// handler.
	if n := b.count.Load(); n != 8 {
		t.Fatalf("%d deliveries, want 8", n)
	}
}
