package external

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
)

// collectSingletons registers specs as a runner does (Types.Collect) on
// top of what types holds.
func collectSingletons(types *entity.Types, specs []string) error {
	return types.Collect(func(h *entity.Host) error { return RegisterSingletons(h, specs) })
}

func TestRegisterSingletons(t *testing.T) {
	types := &entity.Types{}
	if err := types.RegisterFunc("leader", func(context.Context, *task.Task) (json.RawMessage, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	// A task type of the same name is no conflict: another namespace.
	if err := collectSingletons(types, []string{"leader=http://127.0.0.1:1/x", "sweeper=exec:sleep 1"}); err == nil {
		t.Fatal("a spec without a kind was accepted")
	}
	if err := collectSingletons(types, []string{"leader=http:http://127.0.0.1:1/x", "sweeper=exec:sleep 1"}); err != nil {
		t.Fatal(err)
	}
	if got, want := types.Singletons(), []string{"leader", "sweeper"}; !slices.Equal(got, want) {
		t.Fatalf("singletons = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		specs []string
		want  string
	}{
		{[]string{"a=exec:true", "a=exec:false"}, `type "a" already has a singleton`},
		{[]string{"b=exec:true", "c=ftp://x"}, `unknown kind "ftp"`},
		{[]string{"noequals"}, `want TYPE=SPEC`},
		{[]string{"=exec:true"}, `want TYPE=SPEC`},
		{[]string{"bad/type=exec:true"}, `not one of`},
		{[]string{"d=exec:true", "leader=exec:true"}, `type "leader" is already a singleton`},
		{[]string{"e=http:"}, `no URL after http:`},
		{[]string{"f=exec: "}, `no command after exec:`},
	} {
		err := collectSingletons(types, tc.specs)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "singleton") || !errors.Is(err, runner.ErrInvalidConfig) {
			t.Errorf("RegisterSingletons(%q) = %v, want an invalid-config error containing %q", tc.specs, err, tc.want)
		}
		if got := types.Singletons(); !slices.Equal(got, []string{"leader", "sweeper"}) {
			t.Errorf("RegisterSingletons(%q) failed but registered %v", tc.specs, got)
		}
	}
	var se *HandlerSpecError
	if _, err := NewSingleton("x", "grpc:y"); !errors.As(err, &se) || se.Spec != "grpc:y" || se.For != "singleton" {
		t.Errorf("NewSingleton(grpc:y) = %v, want a *HandlerSpecError naming the spec", err)
	}
}

// runSingleton makes an instance of f and runs it in the background; the
// channel gets Run's result.
func runSingleton(t *testing.T, ctx context.Context, f entity.SingletonFactory) <-chan error {
	t.Helper()
	s, err := f()
	if err != nil || s == nil {
		t.Fatalf("factory: %v, %v", s, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return done
}

// within waits for Run's result.
func within(t *testing.T, done <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s: Run did not return within %s", what, d)
		return nil
	}
}

func TestHTTPSingleton(t *testing.T) {
	type open struct {
		body   singletonRequest
		header http.Header
	}
	opened := make(chan open, 4)
	closed := make(chan struct{}, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hold", func(w http.ResponseWriter, r *http.Request) {
		var req singletonRequest
		// The server notices the client going away only once the body is
		// read.
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		io.Copy(io.Discard, r.Body)
		opened <- open{req, r.Header.Clone()}
		<-r.Context().Done()
		closed <- struct{}{}
	})
	mux.HandleFunc("POST /busy", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "not now", 503) })
	mux.HandleFunc("POST /done", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /stream", func(w http.ResponseWriter, r *http.Request) {
		// A response whose body never ends still ends the run.
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := handlerCtx(t)

	// Held open until the runner stops it; the server sees the close.
	f, err := NewSingleton("leader", "http:"+srv.URL+"/hold", WithRunnerID("r7"))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	done := runSingleton(t, rctx, f)
	var got open
	select {
	case got = <-opened:
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the endpoint")
	}
	if got.body != (singletonRequest{Singleton: "leader", Runner: "r7"}) || got.header.Get("Tenure-Singleton") != "leader" {
		t.Errorf("request %+v, Tenure-Singleton %q; want leader on r7", got.body, got.header.Get("Tenure-Singleton"))
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while the request was open", err)
	default:
	}
	stopped := errors.New("lock lost")
	begin := time.Now()
	cancel(stopped)
	if err := within(t, done, 2*time.Second, "cancelled"); !errors.Is(err, stopped) {
		t.Errorf("cancelled: Run = %v, want the cause", err)
	}
	select {
	case <-closed:
		t.Logf("stopped: the endpoint saw the close %s after the cancel", time.Since(begin).Round(time.Microsecond))
	case <-time.After(2 * time.Second):
		t.Fatal("the endpoint did not see the request end")
	}

	// Any response ends Run: 2xx as a return, others as a failure.
	f, _ = NewSingleton("leader", "http:"+srv.URL+"/done")
	if err := within(t, runSingleton(t, ctx, f), 5*time.Second, "204"); err != nil {
		t.Errorf("204: Run = %v, want nil", err)
	}
	f, _ = NewSingleton("leader", "http:"+srv.URL+"/busy")
	if err := within(t, runSingleton(t, ctx, f), 5*time.Second, "503"); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "not now") {
		t.Errorf("503: Run = %v, want an error with the status and body", err)
	}
	f, _ = NewSingleton("leader", "http:"+srv.URL+"/stream")
	if err := within(t, runSingleton(t, ctx, f), 5*time.Second, "streamed 200"); err != nil {
		t.Errorf("streamed 200: Run = %v, want nil", err)
	}

	// An endpoint nobody listens on: a transport error.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	f, _ = NewSingleton("leader", "http:http://"+addr+"/x")
	if err := within(t, runSingleton(t, ctx, f), 10*time.Second, "refused"); err == nil || !strings.Contains(err.Error(), "leader") {
		t.Errorf("no endpoint: Run = %v, want a transport error naming the singleton", err)
	}
}

func TestExecSingleton(t *testing.T) {
	ctx := handlerCtx(t)
	dir := t.TempDir()
	t.Setenv("TENURE_S3_SECRET_KEY", "hunter2")

	// Runs until stopped, with its identity and without the runner's
	// configuration; SIGTERM ends it at once.
	envFile := filepath.Join(dir, "env")
	f, err := NewSingleton("sweeper", `exec:echo "$TENURE_SINGLETON $TENURE_SINGLETON_RUNNER ${TENURE_S3_SECRET_KEY:-none}" > `+envFile+".tmp; mv "+envFile+".tmp "+envFile+"; sleep 30",
		WithRunnerID("r2"))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	done := runSingleton(t, rctx, f)
	waitFile(t, envFile)
	if b, _ := os.ReadFile(envFile); strings.TrimSpace(string(b)) != "sweeper r2 none" {
		t.Errorf("environment %q, want the type, the runner and no TENURE_* config", b)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while the command ran", err)
	default:
	}
	stopped := errors.New("drained")
	begin := time.Now()
	cancel(stopped)
	if err := within(t, done, ExecKillGrace, "SIGTERM"); !errors.Is(err, stopped) {
		t.Errorf("cancelled: Run = %v, want the cause", err)
	}
	t.Logf("stopped: Run returned %s after the cancel", time.Since(begin).Round(time.Microsecond))

	// A command that ignores SIGTERM is killed, with its children, after
	// the grace.
	pidFile := filepath.Join(dir, "child.pid")
	const grace = 300 * time.Millisecond
	s := &execSingleton{typ: "sweeper", command: "trap '' TERM; sleep 30 & echo $! > " + pidFile + ".tmp; mv " + pidFile + ".tmp " + pidFile + "; wait",
		opts: singletonOptions{grace: grace}}
	rctx, cancel = context.WithCancelCause(ctx)
	done = runSingleton(t, rctx, func() (entity.Singleton, error) { return s, nil })
	waitFile(t, pidFile)
	child := readPid(t, pidFile)
	begin = time.Now()
	cancel(stopped)
	if err := within(t, done, 10*time.Second, "SIGKILL"); !errors.Is(err, stopped) {
		t.Errorf("TERM ignored: Run = %v, want the cause", err)
	}
	if d := time.Since(begin); d < grace {
		t.Errorf("returned %s after SIGTERM, before the %s grace: was TERM not ignored?", d, grace)
	}
	waitDead(t, child)

	// Exiting ends Run: status 0 as a return, others as a failure.
	f, _ = NewSingleton("sweeper", "exec:true")
	if err := within(t, runSingleton(t, ctx, f), 10*time.Second, "exit 0"); err != nil {
		t.Errorf("exit 0: Run = %v, want nil", err)
	}
	f, _ = NewSingleton("sweeper", "exec:echo 'no leader lock' >&2; exit 3")
	err = within(t, runSingleton(t, ctx, f), 10*time.Second, "exit 3")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), strconv.Quote("no leader lock")) {
		t.Errorf("exit 3: Run = %v, want the status and stderr", err)
	}
}
