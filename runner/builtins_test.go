package runner

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/storage"
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

// TestCounterSurvivesRestart: the built-in counter's total is durable. Calls
// and a task add to it; a second runner over the same etcd and S3, after the
// first one stopped, reads the same total and keeps counting; a read does
// not write (its revision stays).
func TestCounterSurvivesRestart(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	withCounter := WithTypes(func(h *entity.Host) error { return h.Define(CounterDefinition(TypeCounter)) })
	x := c.start("first", withCounter)
	cfg := x.r.Config()
	client, err := Connect(ctx, cfg, WithClientLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	call := func(in string) int64 {
		t.Helper()
		reply, err := client.Call(ctx, TypeCounter, "c1", []byte(in))
		if err != nil {
			t.Fatalf("call counter c1 %s: %v", in, err)
		}
		var out CounterState
		if err := json.Unmarshal(reply, &out); err != nil {
			t.Fatalf("reply %s: %v", reply, err)
		}
		return out.Total
	}
	if got := call(`{"add":2}`); got != 2 {
		t.Fatalf("first add: total %d, want 2", got)
	}
	if got := call(`{"add":2}`); got != 4 {
		t.Fatalf("second add: total %d, want 4", got)
	}
	tk, _, err := task.SubmitInput(ctx, client, task.SubmitRequest{Type: TypeCounter, Entity: "c1"}, CounterInput{Add: ptr(int64(10))})
	if err != nil {
		t.Fatal(err)
	}
	done, err := client.Wait(ctx, tk.Ref(), 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := task.Result[CounterState](done); err != nil || res.Total != 14 {
		t.Fatalf("task add 10: %+v, %v; want total 14", res, err)
	}
	if got := call(`{}`); got != 14 {
		t.Fatalf("read: total %d, want 14", got)
	}
	// An add over the bound is the counter's application error: its code
	// and details reach the caller, which learns the handler ran (and
	// refused), and a task with it fails at once (Permanent).
	_, err = client.Call(ctx, TypeCounter, "c1", []byte(`{"add":2000000000}`))
	var ae *entity.AppError
	if !errors.As(err, &ae) || ae.Code != CounterOutOfRange || !strings.Contains(ae.Message, "must be in") ||
		!strings.Contains(string(ae.Details), `"add":2000000000`) || ae.HTTPStatus() != 422 ||
		messaging.AppliedOf(err) != messaging.AppliedYes || messaging.Retryable(err) {
		t.Fatalf("an add over the bound: %v (%+v); want the application error %s, applied", err, ae, CounterOutOfRange)
	}
	big, _, err := task.SubmitInput(ctx, client, task.SubmitRequest{Type: TypeCounter, Entity: "c1", MaxAttempts: 5}, CounterInput{Add: ptr(int64(2_000_000_000))})
	if err != nil {
		t.Fatal(err)
	}
	if done, err := client.Wait(ctx, big.Ref(), 20*time.Millisecond); err != nil || done.Status != task.Failed || done.Attempt != 1 {
		t.Fatalf("task add over the bound: %+v, %v; want failed at attempt 1", done, err)
	}
	x.stop(t)

	y := c.start("second", withCounter)
	defer y.stop(t)
	if got := call(""); got != 14 {
		t.Fatalf("after the restart: total %d, want 14", got)
	}
	// Get, the read-only operation, reads the same total.
	if got, err := entity.Call[CounterState](ctx, client, TypeCounter, "c1", "get", nil); err != nil || got.Total != 14 {
		t.Fatalf("get after the restart: %+v, %v; want total 14", got, err)
	}
	if _, err := entity.Call[CounterState](ctx, client, TypeCounter, "c1", "reset", nil); !errors.Is(err, entity.ErrUnknownOp) && !errors.Is(err, entity.ErrBadInput) {
		t.Fatalf("an unknown operation: %v; want it refused as unknown", err)
	}
	if got := call(`{"add":-4}`); got != 10 {
		t.Fatalf("add -4 after the restart: total %d, want 10", got)
	}
	if _, err := client.Call(ctx, TypeCounter, "c1", []byte(`{"add":"x"}`)); err == nil {
		t.Fatal("a non-numeric add: no error")
	}
}

func ptr[T any](v T) *T { return &v }
