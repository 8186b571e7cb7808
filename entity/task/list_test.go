package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/memstore"
)

func TestWait(t *testing.T) {
	e := newEnv(t, 4)
	ctx := testCtx(t)
	tk := e.submit(t, SubmitRequest{Type: "email"})
	run, etag := e.claim(t, tk.Ref(), runnerA)
	// The first polls fail transiently; Wait keeps going.
	faults := e.mem.Inject(memstore.Fault{Op: memstore.OpGet, Err: storage.ErrUnavailable, Times: 2})
	type result struct {
		t   *Task
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := e.cli.Wait(ctx, tk.Ref(), 10*time.Millisecond)
		done <- result{got, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Wait returned before the task finished: %+v %v", r.t, r.err)
	default:
	}
	run.Complete(e.clock.Now(), json.RawMessage(`"ok"`))
	if _, err := e.store.Write(ctx, run, etag); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.t.Status != Completed || string(r.t.Result) != `"ok"` || faults.Hits() != 2 {
		t.Fatalf("Wait: %v %+v, %d transient failures", r.err, r.t, faults.Hits())
	}
	// A deadline ends the wait with the last state seen.
	p := e.submit(t, SubmitRequest{Type: "email"})
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	got, err := e.cli.Wait(short, p.Ref(), 0)
	if !errors.Is(err, context.DeadlineExceeded) || got == nil || got.Status != Pending {
		t.Fatalf("Wait past its deadline: %v %+v", err, got)
	}
	if _, err := e.cli.Wait(ctx, "default/0/missing", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Wait for a missing task: %v", err)
	}
}

func TestList(t *testing.T) {
	e := newEnv(t, 4)
	ctx := testCtx(t)
	var all []*Task
	for i := range 12 {
		typ := "a"
		if i%3 == 0 {
			typ = "b"
		}
		// Fixed ids, so the spread over the shards is too.
		tk := e.submit(t, SubmitRequest{ID: fmt.Sprintf("list-%d", i), Type: typ})
		if i%4 == 0 {
			run, etag := e.claim(t, tk.Ref(), runnerA)
			run.Complete(e.clock.Now(), nil)
			e.store.Write(ctx, run, etag)
		}
		all = append(all, tk)
	}
	// A corrupt object and a stray key under tasks/.
	corrupt := TaskKey(storage.ShardID{Group: "default", Index: 2}, "zz-corrupt")
	e.mem.Put(ctx, corrupt, []byte("{"))
	e.mem.Put(ctx, "tasks/default/2/stray.txt", []byte("x"))

	refs := func(ts []*Task) map[string]bool {
		m := map[string]bool{}
		for _, tk := range ts {
			m[tk.Ref()] = true
		}
		return m
	}
	ts, next, err := e.cli.List(ctx, ListOptions{})
	if err != nil || next != "" || len(ts) != 13 {
		t.Fatalf("List all: %v next %q, %d tasks", err, next, len(ts))
	}
	for i := 1; i < len(ts); i++ {
		if ts[i].Key() <= ts[i-1].Key() {
			t.Fatalf("not in key order: %s after %s", ts[i].Key(), ts[i-1].Key())
		}
	}
	if !refs(ts)["default/2/zz-corrupt"] {
		t.Fatal("the corrupt task is not listed")
	}
	// Pages of 5.
	var paged []*Task
	after, pages := "", 0
	for {
		page, next, err := e.cli.List(ctx, ListOptions{Limit: 5, After: after})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		paged = append(paged, page...)
		if next == "" {
			break
		}
		if len(page) != 5 {
			t.Fatalf("page %d has %d tasks", pages, len(page))
		}
		after = next
	}
	if pages != 3 || !reflect.DeepEqual(refs(paged), refs(ts)) || len(paged) != 13 {
		t.Fatalf("%d pages, %d tasks", pages, len(paged))
	}
	// Filters.
	check := func(o ListOptions, keep func(*Task) bool, extra ...string) {
		t.Helper()
		got, _, err := e.cli.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		for _, r := range extra {
			want[r] = true
		}
		for _, tk := range all {
			cur, _ := e.cli.Get(ctx, tk.Ref())
			if keep(cur) {
				want[tk.Ref()] = true
			}
		}
		if len(want) == 0 || !reflect.DeepEqual(refs(got), want) {
			t.Fatalf("List(%+v) = %v, want %v", o, refs(got), want)
		}
	}
	check(ListOptions{Status: Completed}, func(t *Task) bool { return t.Status == Completed })
	check(ListOptions{Type: "b"}, func(t *Task) bool { return t.Type == "b" })
	check(ListOptions{Type: "a", Status: Pending}, func(t *Task) bool { return t.Type == "a" && t.Status == Pending })
	// Without a status or type filter the corrupt object is listed too.
	for i := range 4 {
		shard := storage.ShardID{Group: "default", Index: i}
		var extra []string
		if i == 2 {
			extra = []string{"default/2/zz-corrupt"}
		}
		check(ListOptions{Shard: &shard}, func(t *Task) bool { return t.Shard == shard }, extra...)
	}

	for _, o := range []ListOptions{{Status: "weird"}, {Type: "a.b"}, {Limit: -1}, {Shard: &storage.ShardID{Group: "a/b"}}} {
		if _, _, err := e.cli.List(ctx, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("List(%+v) = %v, want ErrInvalid", o, err)
		}
	}
}

// TestListScanBound: a filter that matches nothing reads at most
// MaxListScan objects per call and returns a cursor to go on.
func TestListScanBound(t *testing.T) {
	e := newEnv(t, 1)
	ctx := testCtx(t)
	for i := range MaxListScan + 5 {
		tk := e.newTask(fmt.Sprintf("t%05d", i))
		tk.Shard = storage.ShardID{Group: "default", Index: 0}
		if _, err := e.store.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	e.mem.ResetCalls()
	ts, next, err := e.cli.List(ctx, ListOptions{Type: "none"})
	if err != nil || len(ts) != 0 || next == "" || e.mem.Calls(memstore.OpGet) != MaxListScan {
		t.Fatalf("first call: %v, %d tasks, next %q, %d reads", err, len(ts), next, e.mem.Calls(memstore.OpGet))
	}
	ts, next, err = e.cli.List(ctx, ListOptions{Type: "none", After: next})
	if err != nil || len(ts) != 0 || next != "" || e.mem.Calls(memstore.OpGet) != MaxListScan+5 {
		t.Fatalf("second call: %v, %d tasks, next %q, %d reads", err, len(ts), next, e.mem.Calls(memstore.OpGet))
	}
}
