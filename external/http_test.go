package external

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

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
	mux.HandleFunc("POST /checked-out", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"code":"checked_out","message":"cart is checked out","details":{"cart":"c1"}}`)
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
	// A 4xx with a JSON {"code", "message", "details"} is an application
	// error, which a caller gets back as it is.
	_, err = call(ctx, "/checked-out", handlerTask(""))
	var ae *entity.AppError
	if !entity.IsPermanent(err) || !errors.As(err, &ae) || ae.Code != "checked_out" || ae.Message != "cart is checked out" ||
		string(ae.Details) != `{"cart":"c1"}` || ae.HTTPStatus() != http.StatusConflict {
		t.Errorf("4xx with an application error: err = %v (%+v), want a permanent AppError with its code, message, details and 409", err, ae)
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
