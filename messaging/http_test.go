package messaging_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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

// tally is an entity type defined by its operations, run by opHost
// through entity.Instance as a host would.
type tally struct {
	N int `json:"n"`
}

func (t *tally) Add(_ entity.Context, by int) (int, error) { t.N += by; return t.N, nil }
func (t *tally) Get(entity.Context) (int, error)           { return t.N, nil }

var tallyDef = entity.Define("tally", func(string) *tally { return &tally{} }, entity.ReadOnly("Get"), entity.Default("Get"))

// opContext is the entity.Context of an operation run by opHost.
type opContext struct {
	context.Context
	d entity.Delivery
}

func (c opContext) Type() string                                         { return c.d.Type }
func (c opContext) ID() string                                           { return c.d.ID }
func (c opContext) Op() string                                           { return c.d.Op }
func (c opContext) Now() time.Time                                       { return time.Now() }
func (c opContext) Caller() entity.Caller                                { return nil }
func (c opContext) Reminder() string                                     { return "" }
func (c opContext) RemindAfter(string, time.Duration, string, any) error { return nil }
func (c opContext) CancelReminder(string) error                          { return nil }

// opHost is a Deliverer running tallyDef's operations on one instance per
// id, the way a host runs a defined type.
func opHost(t *testing.T) *fake {
	var mu sync.Mutex
	insts := map[string]*entity.Instance{}
	return &fake{name: "ops", fn: func(ctx context.Context, d entity.Delivery) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		in, ok := insts[d.ID]
		if !ok {
			var err error
			if in, err = tallyDef.NewInstance(d.ID, nil); err != nil {
				t.Errorf("NewInstance: %v", err)
				return nil, err
			}
			insts[d.ID] = in
		}
		return in.Run(opContext{ctx, d}, d.Op, d.Body, func(json.RawMessage) error { return nil })
	}}
}

// TestHTTPOperations calls a defined type's operations by name over HTTP:
// the operation reaches the owner, a send carries it too, a malformed
// name is refused before any call, and an operation the type lacks
// comes back as 400 unknown_operation listing the type's operations.
func TestHTTPOperations(t *testing.T) {
	testenv.CheckLeaks(t)
	h := opHost(t)
	v := newView()
	v.runner("b", serve(t, h))
	v.lock("b", 5)
	c, _ := v.client(t)
	hs := httptest.NewServer(messaging.HTTPHandler(c))
	defer hs.Close()

	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(hs.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(got)
	}
	steps := []struct {
		name, path, body string
		status           int
		want             string // substring of the response body
	}{
		{"operation", "/v1/entities/tally/t1/Add", `2`, 200, `2`},
		{"operation, lower case", "/v1/entities/tally/t1/add", `3`, 200, `5`},
		{"send an operation", "/v1/entities/tally/t1/Add?send=1", `10`, 202, `{}`},
		{"default operation", "/v1/entities/tally/t1", ``, 200, `15`},
		{"named default", "/v1/entities/tally/t1/Get", `{}`, 200, `15`},
		{"malformed name", "/v1/entities/tally/t1/add-one", `1`, 400, `operation \"add-one\"`},
		{"unknown operation", "/v1/entities/tally/t1/Reset", `{}`, 400, `"code":"unknown_operation"`},
	}
	for _, s := range steps {
		body := s.body
		if body == "" {
			body = "null"
		}
		status, got := post(s.path, body)
		if status != s.status || !strings.Contains(got, s.want) {
			t.Fatalf("%s: POST %s: %d %s; want %d containing %s", s.name, s.path, status, got, s.status, s.want)
		}
		if s.name == "send an operation" {
			// The fake runs a send before the server accepts it, so the
			// next step reads its effect.
			if d := h.lastDelivery(); d.Op != "Add" || !d.OneWay {
				t.Fatalf("send delivered op %q, one way %v; want Add, one way", d.Op, d.OneWay)
			}
		}
		if s.name == "unknown operation" {
			var e messaging.ErrorBody
			if err := json.Unmarshal([]byte(got), &e); err != nil {
				t.Fatal(err)
			}
			if e.Applied != "no" || !strings.Contains(e.Error, `"Reset"`) || !strings.Contains(e.Error, "Add, Get") {
				t.Fatalf("unknown operation body %+v; want applied no, naming Reset and listing Add, Get", e)
			}
		}
	}
	// Every step but the malformed name reached the owner.
	if n := h.count.Load(); n != int64(len(steps)-1) {
		t.Fatalf("%d deliveries, want %d", n, len(steps)-1)
	}
}
