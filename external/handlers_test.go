package external

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
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

// nopWakes satisfies NewHost, which watches wake-ups only once it owns
// shards; these tests give it none.
type nopWakes struct{ storage.WakeWatcher }

func newTestHost(t *testing.T) *entity.Host {
	t.Helper()
	h, err := entity.NewHost(task.NewStore(memstore.New()), nopWakes{}, "r1", entity.DefaultConfig())
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

func TestRegisterHandlers(t *testing.T) {
	h := newTestHost(t)
	if err := runner.RegisterBuiltins(h); err != nil {
		t.Fatal(err)
	}
	if err := RegisterHandlers(h, []string{"hook=http:http://127.0.0.1:1/x", "script=exec:cat"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"counter", "echo", "hook", "script", "sleep"}
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
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, runner.ErrInvalidConfig) && !errors.Is(err, entity.ErrInvalidConfig) {
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
		if !errors.As(err, &se) || se.Spec != spec || !errors.Is(err, runner.ErrInvalidConfig) {
			t.Errorf("NewHandler(%q) = %v, want a *HandlerSpecError naming it", spec, err)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Quote(spec)) {
			t.Errorf("NewHandler(%q): message %q does not name the spec", spec, err)
		}
	}
}
