package runner

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
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
