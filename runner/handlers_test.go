package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/memstore"
)

// handlerTask is a running task as a handler sees it.
func handlerTask(input string) *task.Task {
	return &task.Task{
		ID: "t-1", Type: "job", Entity: "acct-7", Shard: storage.ShardID{Group: "default", Index: 3},
		Input: json.RawMessage(input), Status: task.Running, Attempt: 2, MaxAttempts: 5,
		Timeout: task.Duration(30 * time.Second),
	}
}

func handlerCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// nopRunnerStore satisfies NewHost, which uses the runner store only once
// it owns shards; these tests give it none.
type nopRunnerStore struct{ storage.RunnerStore }

func newTestHost(t *testing.T) *entity.Host {
	t.Helper()
	h, err := entity.NewHost(task.NewStore(memstore.New()), nopRunnerStore{}, "r1", entity.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Close(ctx)
	})
	return h
}

func TestBuiltins(t *testing.T) {
	ctx := handlerCtx(t)
	out, err := echo(ctx, handlerTask(`{"x":1}`))
	if err != nil || string(out) != `{"x":1}` {
		t.Fatalf("echo = %s, %v; want its input", out, err)
	}
	out, err = echo(ctx, handlerTask(""))
	if err != nil || string(out) != "null" {
		t.Fatalf("echo of no input = %s, %v; want null", out, err)
	}

	start := time.Now()
	out, err = sleep(ctx, handlerTask(`{"ms":30}`))
	if err != nil || string(out) != `{"slept_ms":30}` {
		t.Fatalf("sleep = %s, %v", out, err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("sleep 30ms returned after %s", d)
	}
	out, err = sleep(ctx, handlerTask(""))
	if err != nil || string(out) != `{"slept_ms":0}` {
		t.Fatalf("sleep without input = %s, %v", out, err)
	}

	cctx, cancel := context.WithCancelCause(ctx)
	interrupted := errors.New("interrupted")
	cancel(interrupted)
	start = time.Now()
	if _, err := sleep(cctx, handlerTask(`{"ms":600000}`)); !errors.Is(err, interrupted) {
		t.Fatalf("interrupted sleep: err = %v, want the interruption cause", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("interrupted sleep took %s", d)
	}
	for _, in := range []string{`{"ms":-1}`, `"ten"`, `{"ms":"10"}`, `{"ms":100000000000}`} {
		if _, err := sleep(ctx, handlerTask(in)); !entity.IsPermanent(err) {
			t.Errorf("sleep %s: err = %v, want a permanent failure", in, err)
		}
	}
}

func TestRegisterHandlers(t *testing.T) {
	h := newTestHost(t)
	if err := RegisterBuiltins(h); err != nil {
		t.Fatal(err)
	}
	if err := RegisterHandlers(h, []string{"hook=http:http://127.0.0.1:1/x", "script=exec:cat"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"echo", "hook", "script", "sleep"}
	if got := slices.Sorted(slices.Values(h.Types())); !slices.Equal(got, want) {
		t.Fatalf("types = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		specs []string
		want  string
	}{
		{[]string{"echo=exec:cat"}, `type "echo" is built in`},
		{[]string{"a=exec:cat", "a=exec:true"}, `type "a" already has a handler`},
		{[]string{"b=exec:cat", "c=ftp://x"}, `unknown kind "ftp"`},
		{[]string{"noequals"}, `want TYPE=SPEC`},
		{[]string{"bad/type=exec:cat"}, `not one of`},
		{[]string{"d=exec:cat", "hook=exec:cat"}, `type "hook" is already registered`},
	} {
		before := slices.Sorted(slices.Values(h.Types()))
		err := RegisterHandlers(h, tc.specs)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidConfig) && !errors.Is(err, entity.ErrInvalidConfig) {
			t.Errorf("RegisterHandlers(%q) = %v, want an error containing %q", tc.specs, err, tc.want)
		}
		after := slices.Sorted(slices.Values(h.Types()))
		if !slices.Equal(before, after) {
			t.Errorf("RegisterHandlers(%q) failed but registered %v", tc.specs, after)
		}
	}
}

func TestNewHandlerSpecErrors(t *testing.T) {
	for _, spec := range []string{"", "cat", "http:", "http:ftp://x/y", "http://x/y", "http:http://", "http:http://a b/", "exec:", "exec:   ", "grpc:x"} {
		_, err := NewHandler(spec, nil)
		var se *HandlerSpecError
		if !errors.As(err, &se) || se.Spec != spec || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewHandler(%q) = %v, want a *HandlerSpecError naming it", spec, err)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Quote(spec)) {
			t.Errorf("NewHandler(%q): message %q does not name the spec", spec, err)
		}
	}
}

func TestHTTPHandler(t *testing.T) {
	var mu sync.Mutex
	var got *task.Task
	var gotHeader http.Header
	reqDone := make(chan error, 4)
	arrived := make(chan struct{}, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ok", func(w http.ResponseWriter, r *http.Request) {
		var tk task.Task
		if err := json.NewDecoder(r.Body).Decode(&tk); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		mu.Lock()
		got, gotHeader = &tk, r.Header.Clone()
		mu.Unlock()
		fmt.Fprintf(w, ` {"seen":%q} `+"\n", tk.Input)
	})
	mux.HandleFunc("POST /empty", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /text", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	mux.HandleFunc("POST /huge", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `"`+strings.Repeat("a", MaxHandlerResult)+`"`)
	})
	mux.HandleFunc("POST /bad", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, "HEAD"+strings.Repeat("x", 3000)+"TAIL")
	})
	mux.HandleFunc("POST /busy", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "try later", 503) })
	mux.HandleFunc("POST /limited", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "slow down", 429) })
	mux.HandleFunc("POST /moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("POST /block", func(w http.ResponseWriter, r *http.Request) {
		// The server notices a client going away only once the body is read.
		io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-r.Context().Done()
		reqDone <- r.Context().Err()
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer srv.CloseClientConnections()

	call := func(ctx context.Context, path string, tk *task.Task) (json.RawMessage, error) {
		t.Helper()
		h, err := NewHandler("http:"+srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return h(ctx, tk)
	}
	ctx := handlerCtx(t)

	out, err := call(ctx, "/ok", handlerTask(`{"n":1}`))
	if err != nil || string(out) != `{"seen":"{\"n\":1}"}` {
		t.Fatalf("2xx: %s, %v", out, err)
	}
	mu.Lock()
	if got == nil || got.ID != "t-1" || got.Type != "job" || got.Entity != "acct-7" || got.Attempt != 2 || got.Shard.Index != 3 {
		t.Errorf("the server got task %+v, want the task's JSON", got)
	}
	if gotHeader.Get("Content-Type") != "application/json" || gotHeader.Get("Tenure-Task-Ref") != "default/3/t-1" {
		t.Errorf("request headers = %v", gotHeader)
	}
	mu.Unlock()

	if out, err := call(ctx, "/empty", handlerTask("")); err != nil || string(out) != "null" {
		t.Errorf("204: %s, %v; want null", out, err)
	}
	for _, path := range []string{"/text", "/huge", "/moved"} {
		if _, err := call(ctx, path, handlerTask("")); !entity.IsPermanent(err) {
			t.Errorf("%s: err = %v, want a permanent failure", path, err)
		}
	}
	_, err = call(ctx, "/bad", handlerTask(""))
	if !entity.IsPermanent(err) || !strings.Contains(err.Error(), "422") || !strings.Contains(err.Error(), "HEAD") || strings.Contains(err.Error(), "TAIL") {
		t.Errorf("4xx: err = %v, want permanent with the status and the body's first KiB", err)
	}
	for _, path := range []string{"/busy", "/limited"} {
		if _, err := call(ctx, path, handlerTask("")); err == nil || entity.IsPermanent(err) {
			t.Errorf("%s: err = %v, want a retryable failure", path, err)
		}
	}

	// Nothing listens: retryable.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	h, _ := NewHandler("http:http://"+dead+"/x", nil)
	if _, err := h(ctx, handlerTask("")); err == nil || entity.IsPermanent(err) {
		t.Errorf("connection refused: err = %v, want a retryable failure", err)
	}

	// The task's timeout bounds the request.
	tk := handlerTask("")
	tk.Timeout = task.Duration(200 * time.Millisecond)
	start := time.Now()
	_, err = call(ctx, "/block", tk)
	if !errors.Is(err, errHandlerTimeout) || entity.IsPermanent(err) {
		t.Errorf("timeout: err = %v, want a retryable timeout", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 10*time.Second {
		t.Errorf("timeout after %s, want about 200ms", d)
	}
	<-arrived
	waitServerSawCancel(t, reqDone)

	// Interrupting the task cancels the request.
	cctx, cancel := context.WithCancelCause(ctx)
	interrupted := errors.New("shard lost")
	result := make(chan error, 1)
	go func() {
		_, err := call(cctx, "/block", handlerTask(""))
		result <- err
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the server")
	}
	cancel(interrupted)
	select {
	case err := <-result:
		if !errors.Is(err, interrupted) {
			t.Errorf("interrupted: err = %v, want the interruption cause", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not return after its task was interrupted")
	}
	waitServerSawCancel(t, reqDone)
}

func waitServerSawCancel(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server's request context was not cancelled")
	}
}

func TestExecHandler(t *testing.T) {
	ctx := handlerCtx(t)
	t.Setenv("TENURE_S3_SECRET_KEY", "hunter2")
	run := func(ctx context.Context, command string, tk *task.Task) (json.RawMessage, error) {
		t.Helper()
		h, err := NewHandler("exec:"+command, nil)
		if err != nil {
			t.Fatal(err)
		}
		return h(ctx, tk)
	}

	if out, err := run(ctx, "cat", handlerTask(`{"a": [1, 2]}`)); err != nil || string(out) != `{"a": [1, 2]}` {
		t.Errorf("cat: %s, %v; want the input back", out, err)
	}
	out, err := run(ctx, `printf '{"id":"%s","ref":"%s","type":"%s","entity":"%s","attempt":%s,"secret":"%s"}' `+
		`"$TENURE_TASK_ID" "$TENURE_TASK_REF" "$TENURE_TASK_TYPE" "$TENURE_TASK_ENTITY" "$TENURE_TASK_ATTEMPT" "${TENURE_S3_SECRET_KEY:-}"`, handlerTask(""))
	want := `{"id":"t-1","ref":"default/3/t-1","type":"job","entity":"acct-7","attempt":2,"secret":""}`
	if err != nil || string(out) != want {
		t.Errorf("environment: %s, %v; want %s (and no TENURE_* config)", out, err, want)
	}
	if out, err := run(ctx, "true", handlerTask("")); err != nil || string(out) != "null" {
		t.Errorf("no stdout: %s, %v; want null", out, err)
	}

	_, err = run(ctx, "echo 'db locked' >&2; exit 75", handlerTask(""))
	if err == nil || entity.IsPermanent(err) || !strings.Contains(err.Error(), "db locked") {
		t.Errorf("exit 75: err = %v, want a retryable failure with stderr", err)
	}
	_, err = run(ctx, "printf 'HEAD%3000s' x >&2; printf 'TAIL' >&2; exit 3", handlerTask(""))
	if !entity.IsPermanent(err) || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "TAIL") || strings.Contains(err.Error(), "HEAD") {
		t.Errorf("exit 3: err = %v, want permanent with the last KiB of stderr", err)
	}
	if len(err.Error()) > 2*handlerErrorTail {
		t.Errorf("exit 3: error is %d bytes, want about 1 KiB", len(err.Error()))
	}
	if _, err := run(ctx, "echo not json", handlerTask("")); !entity.IsPermanent(err) || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("non-JSON stdout: err = %v, want permanent", err)
	}
	if _, err := run(ctx, fmt.Sprintf(`printf '"%%%ds"' x`, MaxHandlerResult), handlerTask("")); !entity.IsPermanent(err) || !strings.Contains(err.Error(), "over") {
		t.Errorf("huge stdout: err = %v, want permanent", err)
	}
	// Input larger than a pipe buffer, never read: no hang, no failure.
	big := `"` + strings.Repeat("b", 1<<20) + `"`
	if out, err := run(ctx, "echo 1", handlerTask(big)); err != nil || string(out) != "1" {
		t.Errorf("unread input: %s, %v", out, err)
	}

	// Processes left behind in the command's group die with it.
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "bg.pid")
	if _, err := run(ctx, "sleep 30 >/dev/null 2>&1 & echo $! > "+pidFile, handlerTask("")); err != nil {
		t.Fatal(err)
	}
	waitDead(t, readPid(t, pidFile))
}

func TestExecHandlerInterrupted(t *testing.T) {
	ctx := handlerCtx(t)
	dir := t.TempDir()

	// SIGTERM ends a plain command at once.
	started := filepath.Join(dir, "started")
	cctx, cancel := context.WithCancelCause(ctx)
	interrupted := errors.New("detached")
	result := make(chan error, 1)
	h, err := NewHandler("exec:touch "+started+"; sleep 30", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := h(cctx, handlerTask(""))
		result <- err
	}()
	waitFile(t, started)
	start := time.Now()
	cancel(interrupted)
	select {
	case err := <-result:
		if !errors.Is(err, interrupted) {
			t.Errorf("err = %v, want the interruption cause", err)
		}
		if d := time.Since(start); d > ExecKillGrace {
			t.Errorf("sleep 30 took %s to end after SIGTERM", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command was not killed when its task was interrupted")
	}

	// A command that ignores SIGTERM is killed, with its children, after
	// the grace.
	pidFile := filepath.Join(dir, "child.pid")
	const grace = 300 * time.Millisecond
	h = execHandler("trap '' TERM; sleep 30 & echo $! > "+pidFile+"; wait", grace)
	cctx, cancel = context.WithCancelCause(ctx)
	go func() {
		_, err := h(cctx, handlerTask(""))
		result <- err
	}()
	waitFile(t, pidFile)
	child := readPid(t, pidFile)
	start = time.Now()
	cancel(interrupted)
	select {
	case err := <-result:
		d := time.Since(start)
		if !errors.Is(err, interrupted) {
			t.Errorf("err = %v, want the interruption cause", err)
		}
		if d < grace {
			t.Errorf("returned %s after SIGTERM, before the %s grace: was TERM not ignored?", d, grace)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a TERM-ignoring command was not killed")
	}
	waitDead(t, child)

	// The task's timeout ends the command too, as a retryable failure.
	tk := handlerTask("")
	tk.Timeout = task.Duration(200 * time.Millisecond)
	start = time.Now()
	_, err = execHandler("sleep 30", grace)(ctx, tk)
	if !errors.Is(err, errHandlerTimeout) || entity.IsPermanent(err) {
		t.Errorf("timeout: err = %v, want a retryable timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timeout took %s", d)
	}
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			pid = n
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return pid
}

// waitDead waits until pid has exited (a zombie counts: it runs nothing).
func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if _, rest, ok := strings.Cut(string(b), ") "); ok && strings.HasPrefix(rest, "Z") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs: %s", pid, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
