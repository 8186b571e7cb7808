package task_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/memstore"
)

type point struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// TestSubmitInput: a typed input is stored as its JSON; giving raw input
// too, or an input that does not encode, is refused before any I/O.
func TestSubmitInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := task.NewClient(task.NewStore(memstore.New()), task.ClientConfig{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	tk, created, err := task.SubmitInput(ctx, c, task.SubmitRequest{Type: "plot"}, point{X: 1, Y: 2})
	if err != nil || !created {
		t.Fatalf("submit: %v (created %v)", err, created)
	}
	got, err := c.Get(ctx, tk.Ref())
	if err != nil || string(got.Input) != `{"x":1,"y":2}` {
		t.Fatalf("stored input %s, %v", got.Input, err)
	}
	_, _, err = task.SubmitInput(ctx, c, task.SubmitRequest{Type: "plot", Input: json.RawMessage(`{}`)}, point{})
	if !errors.Is(err, task.ErrInvalid) || !strings.Contains(err.Error(), "not both") {
		t.Errorf("raw and typed input: %v", err)
	}
	_, _, err = task.SubmitInput(ctx, c, task.SubmitRequest{Type: "plot"}, make(chan int))
	if !errors.Is(err, task.ErrInvalid) || !strings.Contains(err.Error(), "chan int") {
		t.Errorf("unencodable input: %v", err)
	}
}

// TestResult: a completed task's result decodes into the type asked for;
// a task that has not completed, or whose result has another shape, gives
// an error saying which.
func TestResult(t *testing.T) {
	shard := storage.ShardID{Group: "default", Index: 1}
	done := &task.Task{ID: "a", Shard: shard, Status: task.Completed, Result: json.RawMessage(`{"x":3,"y":4}`)}
	p, err := task.Result[point](done)
	if err != nil || p != (point{3, 4}) {
		t.Fatalf("Result: %+v, %v", p, err)
	}
	if p, err := task.Result[*point](&task.Task{ID: "b", Shard: shard, Status: task.Completed}); err != nil || p != nil {
		t.Fatalf("empty result: %v, %v; want nil, nil", p, err)
	}
	_, err = task.Result[[]string](done)
	var re *task.ResultError
	if !errors.As(err, &re) || !errors.Is(err, task.ErrResultType) || !strings.Contains(err.Error(), "default/1/a") || !strings.Contains(err.Error(), "[]string") {
		t.Fatalf("wrong shape: %v", err)
	}
	failed := &task.Task{ID: "c", Shard: shard, Status: task.Failed, Error: "no luck"}
	if _, err := task.Result[point](failed); !errors.Is(err, task.ErrNotCompleted) || !strings.Contains(err.Error(), "failed: no luck") {
		t.Fatalf("failed task: %v", err)
	}
	if _, err := task.Result[point](&task.Task{ID: "d", Shard: shard, Status: task.Running}); !errors.Is(err, task.ErrNotCompleted) || !strings.Contains(err.Error(), "default/1/d is running") {
		t.Fatalf("running task: %v", err)
	}
	if _, err := task.Result[point](nil); !errors.Is(err, task.ErrNotCompleted) {
		t.Fatalf("nil task: %v", err)
	}
}
