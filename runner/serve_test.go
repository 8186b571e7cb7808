package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// runnerRecords returns the cluster's membership records by runner id.
func (c *testCluster) runnerRecords(t *testing.T) map[string]storage.RunnerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rs, _, err := c.store().Runners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]storage.RunnerInfo{}
	for _, r := range rs {
		out[r.ID] = r
	}
	return out
}

// dials reports whether addr accepts a TCP connection.
func dials(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// TestServe: Serve gives the handler factory a working client (an HTTP
// request adds to a counter through it), and on ctx's end stops the HTTP
// server before the runner: new connections are refused while a request
// in flight still runs, the runner still registered and holding its
// shards; that request completes, calling an entity through the runner
// after ctx ended. Then Serve returns nil, the port is closed and the
// runner's membership record is gone.
func TestServe(t *testing.T) {
	c := newTestCluster(t)
	cfg, _ := c.config("serve")
	// A counter of its own name beside the built-ins: WithEntities.
	r, err := New(cfg, WithTypes(RegisterBuiltins), WithEntities(CounterDefinition("tally")))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	entered, release := make(chan struct{}), make(chan struct{})
	var factories atomic.Int64
	handler := func(cl *Client) http.Handler {
		factories.Add(1)
		add := func(w http.ResponseWriter, req *http.Request, op string, in any) {
			out, err := entity.Call[CounterState](req.Context(), cl, "tally", req.PathValue("id"), op, in)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			json.NewEncoder(w).Encode(out)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("POST /add/{id}", func(w http.ResponseWriter, req *http.Request) {
			add(w, req, "", CounterInput{Add: ptr(int64(1))})
		})
		mux.HandleFunc("GET /slow/{id}", func(w http.ResponseWriter, req *http.Request) {
			close(entered)
			<-release
			add(w, req, "get", nil)
		})
		return mux
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- r.Serve(ctx, &http.Server{ReadHeaderTimeout: 5 * time.Second}, handler,
			ServeListener(ln), ServeShutdownTimeout(30*time.Second))
	}()

	// The listener exists already: the request waits in its backlog until
	// Serve serves, once the runner is up.
	hc := &http.Client{Timeout: 30 * time.Second}
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	for want := 1; want <= 2; want++ {
		if code, body := get("POST", "/add/c1"); code != http.StatusOK || body != fmt.Sprintf(`{"total":%d}`, want) {
			t.Fatalf("POST /add/c1: %d %s, want the total %d", code, body, want)
		}
	}
	if n := factories.Load(); n != 1 {
		t.Fatalf("the handler factory was called %d times, want once", n)
	}

	// Its membership record lists the types it hosts, built-ins included.
	if rec, ok := c.runnerRecords(t)["serve"]; !ok || !slices.Equal(rec.Types, []string{TypeCounter, TypeEcho, TypeSleep, "tally", schedule.DriverType}) {
		t.Fatalf("membership record of runner serve: %+v (found %v), want types counter, echo, sleep, tally and the schedules' %s", rec, ok, schedule.DriverType)
	}
	testenv.WaitFor(t, "the runner owning every shard", 10*time.Second, func() bool { return r.Status().Owned == c.Meta.Shards })
	slow := make(chan string, 1)
	go func() {
		code, body := get("GET", "/slow/c1")
		slow <- fmt.Sprint(code, " ", body)
	}()
	<-entered
	cancel()
	testenv.WaitFor(t, "the HTTP server refusing new connections", 10*time.Second, func() bool { return !dials(addr) })
	// The HTTP server is stopping; the runner is not: it still holds its
	// shards and its membership record while a request is in flight.
	if st := r.Status(); !st.Registered || st.Draining || st.Owned != c.Meta.Shards {
		t.Fatalf("runner while the HTTP server drains: registered %v, draining %v, owns %d of %d shards; want it still serving",
			st.Registered, st.Draining, st.Owned, c.Meta.Shards)
	}
	if _, ok := c.runnerRecords(t)["serve"]; !ok {
		t.Fatal("membership while the HTTP server drains: no runner serve, want it still there")
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	if got := <-slow; got != `200 {"total":2}` {
		t.Fatalf("the request in flight at the stop: %s, want 200 and the total 2 through the runner", got)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after a stop by ctx: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30s of the stop")
	}
	if dials(addr) {
		t.Error("the port still accepts connections after Serve returned")
	}
	if _, ok := c.runnerRecords(t)["serve"]; ok {
		t.Error("membership after Serve returned: runner serve still there, want it gone")
	}
	if err := r.Serve(context.Background(), &http.Server{}, handler); !errors.Is(err, ErrRunAgain) {
		t.Errorf("a second Serve: %v, want ErrRunAgain", err)
	}
}

// TestServeRunnerCannotStart: a runner that cannot start (its bucket is
// missing) ends Serve with its error; the handler factory is never called
// and the listener is closed.
func TestServeRunnerCannotStart(t *testing.T) {
	c := newTestCluster(t)
	cfg, _ := c.config("nostart", "s3.bucket=no-such-bucket-"+strings.ToLower(testenv.Name(t, 20)))
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	called := false
	err = r.Serve(ctx, &http.Server{}, func(*Client) http.Handler { called = true; return http.NotFoundHandler() }, ServeListener(ln))
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Serve of a runner without its bucket: %v (ctx %v), want its start error", err, ctx.Err())
	}
	if called {
		t.Error("the handler factory was called for a runner that did not start")
	}
	if dials(ln.Addr().String()) {
		t.Error("the listener still accepts connections")
	}
	if err := r.Serve(ctx, nil, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Serve with no server: %v, want ErrInvalidConfig", err)
	}
}
