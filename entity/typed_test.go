package entity_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

type greetIn struct {
	Name  string `json:"name"`
	Times int    `json:"times"`
}

type greetOut struct {
	Greeting string `json:"greeting"`
}

func greet(_ context.Context, in greetIn) (greetOut, error) {
	return greetOut{Greeting: strings.Repeat("hello "+in.Name+" ", in.Times)}, nil
}

func typedTask(input string) *task.Task {
	return &task.Task{ID: "t1", Type: "greet", Shard: storage.ShardID{Group: "default", Index: 3}, Input: json.RawMessage(input)}
}

// TestFuncDecodesAndEncodes: a typed handler gets its input decoded and its
// result encoded; an empty input is the zero value; an error it returns is
// the attempt's, unchanged (not permanent).
func TestFuncDecodesAndEncodes(t *testing.T) {
	h := entity.Func(greet)
	ctx := context.Background()
	for _, c := range []struct{ input, want string }{
		{`{"name":"ann","times":2}`, `{"greeting":"hello ann hello ann "}`},
		{`{"name":"bo","times":1,"extra":true}`, `{"greeting":"hello bo "}`}, // unknown fields are ignored
		{``, `{"greeting":""}`},
		{`null`, `{"greeting":""}`},
	} {
		got, err := h(ctx, typedTask(c.input))
		if err != nil || string(got) != c.want {
			t.Errorf("input %q: %s, %v; want %s", c.input, got, err, c.want)
		}
	}
	boom := errors.New("boom")
	failing := entity.Func(func(context.Context, greetIn) (greetOut, error) { return greetOut{}, boom })
	if _, err := failing(ctx, typedTask(`{}`)); !errors.Is(err, boom) || entity.IsPermanent(err) {
		t.Errorf("handler error: %v, want boom, not permanent", err)
	}
}

// TestFuncBadInput: an input that does not decode is a permanent
// *InputError naming the task, its type and the Go type, and the handler
// is not called.
func TestFuncBadInput(t *testing.T) {
	called := false
	h := entity.Func(func(ctx context.Context, in greetIn) (greetOut, error) {
		called = true
		return greet(ctx, in)
	})
	for _, input := range []string{`{"name":3}`, `[1]`, `{"name":"a"} x`, `"str"`} {
		_, err := h(context.Background(), typedTask(input))
		var ie *entity.InputError
		if !errors.As(err, &ie) || !errors.Is(err, entity.ErrBadInput) || !entity.IsPermanent(err) {
			t.Fatalf("input %q: %v, want a permanent *InputError", input, err)
		}
		for _, want := range []string{"default/3/t1", "type greet", "entity_test.greetIn"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("input %q: %q does not name %q", input, err, want)
			}
		}
	}
	if called {
		t.Error("the handler ran on an input that does not decode")
	}
}

// TestFuncBadResult: a result that does not encode fails the task at once.
func TestFuncBadResult(t *testing.T) {
	h := entity.Func(func(context.Context, greetIn) (float64, error) { return math.NaN(), nil })
	_, err := h(context.Background(), typedTask(`{}`))
	if err == nil || !entity.IsPermanent(err) || !strings.Contains(err.Error(), "float64") {
		t.Fatalf("NaN result: %v, want a permanent error naming float64", err)
	}
}

// TestTaskFuncSeesTask: TaskFunc's handler gets the task with its input.
func TestTaskFuncSeesTask(t *testing.T) {
	h := entity.TaskFunc(func(_ context.Context, tk *task.Task, in greetIn) (string, error) {
		return tk.ID + ":" + in.Name, nil
	})
	got, err := h(context.Background(), typedTask(`{"name":"cy"}`))
	if err != nil || string(got) != `"t1:cy"` {
		t.Fatalf("%s, %v", got, err)
	}
}

// tally is a typed entity instance: a count kept between tasks, with hooks.
type tally struct {
	id      string
	n       int
	started bool
	stopped entity.StopReason
}

func (c *tally) Handle(_ context.Context, _ *task.Task, add int) (map[string]int, error) {
	c.n += add
	return map[string]int{c.id: c.n}, nil
}

func (c *tally) OnStart(context.Context) error { c.started = true; return nil }

func (c *tally) OnStop(_ context.Context, reason entity.StopReason) { c.stopped = reason }

// TestTypedEntity: Typed adapts a typed instance to an Entity that keeps
// its state, decodes and encodes as Func does, and forwards the hooks.
func TestTypedEntity(t *testing.T) {
	var inst *tally
	factory := entity.Typed(func(id string) (entity.Handler[int, map[string]int], error) {
		inst = &tally{id: id}
		return inst, nil
	})
	ent, err := factory("a")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ent.(entity.Starter).OnStart(ctx); err != nil || !inst.started {
		t.Fatalf("OnStart: %v, started %v", err, inst.started)
	}
	for _, in := range []string{`2`, `3`} {
		if _, err := ent.Handle(ctx, typedTask(in)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ent.Handle(ctx, typedTask(`0`))
	if err != nil || string(got) != `{"a":5}` {
		t.Fatalf("after 2+3: %s, %v", got, err)
	}
	if _, err := ent.Handle(ctx, typedTask(`"x"`)); !errors.Is(err, entity.ErrBadInput) || !entity.IsPermanent(err) || inst.n != 5 {
		t.Fatalf("bad input: %v (count %d)", err, inst.n)
	}
	ent.(entity.Stopper).OnStop(ctx, entity.StopIdle)
	if inst.stopped != entity.StopIdle {
		t.Fatalf("OnStop not forwarded: %q", inst.stopped)
	}

	// An instance without hooks: the adapter's are no-ops.
	plain := entity.Typed(func(string) (entity.Handler[int, int], error) { return plainHandler{}, nil })
	pe, _ := plain("b")
	if err := pe.(entity.Starter).OnStart(ctx); err != nil {
		t.Fatal(err)
	}
	pe.(entity.Stopper).OnStop(ctx, entity.StopIdle)
}

type plainHandler struct{}

func (plainHandler) Handle(_ context.Context, _ *task.Task, in int) (int, error) { return in, nil }

// TestTypesCollect: types registered through Collect, by functions written
// against a Host, are checked as a host checks them, duplicates across
// calls included, and a register function sees the types collected before.
func TestTypesCollect(t *testing.T) {
	var types entity.Types
	err := types.Collect(func(h *entity.Host) error { return h.RegisterFunc("greet", entity.Func(greet)) })
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	err = types.Collect(func(h *entity.Host) error {
		seen = h.Types()
		return h.RegisterFunc("greet", entity.Func(greet))
	})
	if !errors.Is(err, entity.ErrInvalidConfig) || !strings.Contains(err.Error(), `"greet" registered twice`) {
		t.Fatalf("duplicate: %v", err)
	}
	if len(seen) != 1 || seen[0] != "greet" {
		t.Fatalf("Types() during Collect: %v, want [greet]", seen)
	}
	for _, bad := range []func(*entity.Host) error{
		func(h *entity.Host) error { return h.RegisterFunc("bad name", entity.Func(greet)) },
		func(h *entity.Host) error { return h.RegisterFunc("nil", nil) },
		func(h *entity.Host) error {
			return h.Register("nilfactory", entity.Typed[int, int](nil))
		},
	} {
		if err := types.Collect(bad); !errors.Is(err, entity.ErrInvalidConfig) {
			t.Errorf("bad registration: %v, want ErrInvalidConfig", err)
		}
	}
	if err := types.Register("tally", entity.Typed(func(id string) (entity.Handler[int, map[string]int], error) {
		return &tally{id: id}, nil
	})); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(types.Names(), ","); got != "greet,tally" {
		t.Fatalf("Names: %s", got)
	}
}
