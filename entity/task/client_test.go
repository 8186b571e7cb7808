package task

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/memstore"
)

func TestNewClientValidates(t *testing.T) {
	s := NewStore(memstore.New())
	for field, cfg := range map[string]ClientConfig{
		"ClientConfig.Shards":   {Shards: 0},
		"ClientConfig.Group":    {Shards: 4, Group: "bad/group"},
		"ClientConfig.Defaults": {Shards: 4, Defaults: SubmitDefaults{Retry: RetryPolicy{Initial: Duration(time.Second), Max: Duration(time.Second), Multiplier: 0.5}}},
	} {
		if _, err := NewClient(s, cfg); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("NewClient(%+v) = %v, want an error naming %s", cfg, err, field)
		}
	}
	if _, err := NewClient(nil, ClientConfig{Shards: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewClient(nil store) = %v", err)
	}
	if err := DefaultSubmit().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestSubmit(t *testing.T) {
	e := newEnv(t, 16)
	tk, created, err := e.cli.Submit(testCtx(t), SubmitRequest{Type: "email", Input: json.RawMessage(`{"to": "a@b.c"}`)})
	if err != nil || !created {
		t.Fatalf("Submit: %v, created %v", err, created)
	}
	want := ShardOf("default", 16, "email", "", tk.ID)
	if tk.Shard != want || tk.Status != Pending || tk.Attempt != 0 || tk.Rev != 1 {
		t.Fatalf("task %+v, want pending in %v at rev 1", tk, want)
	}
	if tk.MaxAttempts != DefaultMaxAttempts || tk.Timeout.Std() != DefaultTimeout || tk.Retry != DefaultRetry() {
		t.Fatalf("defaults: %d %s %v", tk.MaxAttempts, tk.Timeout, tk.Retry)
	}
	if !tk.AvailableAt.Equal(t0) || !tk.CreatedAt.Equal(t0) || len(tk.History) != 1 || tk.History[0].Event != EventSubmitted {
		t.Fatalf("times %s %s history %+v", tk.AvailableAt, tk.CreatedAt, tk.History)
	}
	if !uuidV7.MatchString(tk.ID) {
		t.Fatalf("generated id %q is not a UUIDv7", tk.ID)
	}
	// Durable: the object and its pointer exist, and the owner was woken.
	got, err := e.cli.Get(testCtx(t), tk.Ref())
	if err != nil || got.Rev != 1 || string(got.Input) != `{"to":"a@b.c"}` {
		t.Fatalf("Get: %v %+v", err, got)
	}
	if ps := e.keys(t, ReadyPrefix); !reflect.DeepEqual(ps, []string{tk.PointerKey()}) {
		t.Fatalf("pointers %q, want [%s]", ps, tk.PointerKey())
	}
	if w := e.waker.Calls(); !reflect.DeepEqual(w, []wake{{tk.Shard, tk.PointerKey()}}) {
		t.Fatalf("wake-ups %+v", w)
	}

	// Overrides, a delay and an entity.
	retry := RetryPolicy{Initial: Duration(time.Millisecond), Max: Duration(time.Second), Multiplier: 3}
	tk = e.submit(t, SubmitRequest{ID: "order-1", Type: "cart", Entity: "user-42", Delay: 90 * time.Second,
		MaxAttempts: 2, Timeout: time.Second, Retry: &retry})
	if tk.ID != "order-1" || tk.Shard != ShardOf("default", 16, "cart", "user-42", "x") || !tk.AvailableAt.Equal(t0.Add(90*time.Second)) ||
		tk.MaxAttempts != 2 || tk.Timeout.Std() != time.Second || tk.Retry != retry {
		t.Fatalf("task %+v", tk)
	}
	if p, _ := ParsePointer(tk.PointerKey()); p.EntityKey != EntityKey("cart", "user-42") {
		t.Fatalf("pointer %+v lacks the entity key", p)
	}
	// AvailableAt in the past means now.
	tk = e.submit(t, SubmitRequest{Type: "t", AvailableAt: t0.Add(-time.Hour)})
	if !tk.AvailableAt.Equal(t0) {
		t.Fatalf("available %s, want now", tk.AvailableAt)
	}
	tk = e.submit(t, SubmitRequest{Type: "t", AvailableAt: t0.Add(time.Hour + time.Nanosecond)})
	if !tk.AvailableAt.Equal(t0.Add(time.Hour + time.Millisecond)) {
		t.Fatalf("available %s, want rounded up to the millisecond", tk.AvailableAt)
	}
}

func TestSubmitIdempotent(t *testing.T) {
	e := newEnv(t, 16)
	ctx := testCtx(t)
	first := e.submit(t, SubmitRequest{ID: "job-1", Type: "email", Input: json.RawMessage(`{"a":1,"b":[1,2]}`)})
	// Later (another pointer key) with the same input written differently.
	e.clock.Advance(time.Second)
	again, created, err := e.cli.Submit(ctx, SubmitRequest{ID: "job-1", Type: "email", Input: json.RawMessage(` { "b" : [1,2], "a":1 } `)})
	if err != nil || created {
		t.Fatalf("resubmit: %v, created %v", err, created)
	}
	if again.Rev != 1 || !again.CreatedAt.Equal(first.CreatedAt) || again.PointerKey() != first.PointerKey() {
		t.Fatalf("resubmit returned %+v, want the first task", again)
	}
	if ps := e.keys(t, ReadyPrefix); !reflect.DeepEqual(ps, []string{first.PointerKey()}) {
		t.Fatalf("pointers %q: the resubmit's own pointer must be deleted", ps)
	}
	if n := len(e.waker.Calls()); n != 1 {
		t.Fatalf("%d wake-ups, want 1", n)
	}

	// A different input, or type, under the same id conflicts.
	e.clock.Advance(time.Second)
	for field, req := range map[string]SubmitRequest{
		"input": {ID: "job-1", Type: "email", Input: json.RawMessage(`{"a":2,"b":[1,2]}`)},
		"type":  {ID: "job-1", Type: "sms", Input: json.RawMessage(`{"a":1,"b":[1,2]}`)},
	} {
		cur, created, err := e.cli.Submit(ctx, req)
		var ce *ConflictError
		if !errors.Is(err, ErrConflict) || !errors.As(err, &ce) || ce.Field != field || !strings.Contains(err.Error(), "job-1") || created {
			t.Fatalf("conflicting %s: %v", field, err)
		}
		if cur == nil || cur.Ref() != first.Ref() {
			t.Fatalf("conflict returned %+v, want the existing task", cur)
		}
	}
	if ps := e.keys(t, ReadyPrefix); len(ps) != 1 {
		t.Fatalf("pointers %q after conflicts, want only the task's", ps)
	}
	// Entity tasks: the same id, type and entity with another input.
	e.submit(t, SubmitRequest{ID: "c-1", Type: "cart", Entity: "u", Input: json.RawMessage(`1`)})
	if _, _, err := e.cli.Submit(ctx, SubmitRequest{ID: "c-1", Type: "cart", Entity: "u", Input: json.RawMessage(`2`)}); !errors.Is(err, ErrConflict) {
		t.Fatalf("entity task conflict: %v", err)
	}
	if !sameJSON(nil, nil) || sameJSON(nil, json.RawMessage(`null`)) || sameJSON(json.RawMessage(`1`), json.RawMessage(`1.0`)) {
		t.Fatal("sameJSON edge cases")
	}
}

// TestSubmitOrder: the pointer is written before the task, and the owner
// woken after it; a failed task write leaves a pointer without a task, and
// resubmitting the same id completes the submit.
func TestSubmitOrder(t *testing.T) {
	e := newEnv(t, 16)
	ctx := testCtx(t)
	var mu sync.Mutex
	var ops []string
	failed := false
	e.mem.SetHook(func(ctx context.Context, c memstore.Call) error {
		if c.When != memstore.BeforeApply || (c.Op != memstore.OpPut && c.Op != memstore.OpCreate) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		op := c.Op + " " + strings.SplitN(c.Key, "/", 2)[0]
		if c.Op == memstore.OpCreate && !failed {
			failed = true // the first task write fails before reaching the store
			ops = append(ops, op+" (failed)")
			return storage.ErrUnavailable
		}
		ops = append(ops, op)
		return nil
	})
	tk, created, err := e.cli.Submit(ctx, SubmitRequest{Type: "email"})
	if !errors.Is(err, storage.ErrUnavailable) || created || tk == nil || tk.ID == "" {
		t.Fatalf("Submit with a failing create: %+v %v %v; want the attempted task and the error", tk, created, err)
	}
	if _, err := e.mem.Head(ctx, tk.PointerKey()); err != nil {
		t.Fatalf("the pointer must exist: %v", err)
	}
	if _, err := e.mem.Head(ctx, tk.Key()); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the task must not exist: %v", err)
	}
	if len(e.waker.Calls()) != 0 {
		t.Fatal("woken for a task that does not exist")
	}
	again, created, err := e.cli.Submit(ctx, SubmitRequest{ID: tk.ID, Type: "email"})
	if err != nil || !created || again.PointerKey() != tk.PointerKey() {
		t.Fatalf("resubmit: %v created %v", err, created)
	}
	mu.Lock()
	got := ops
	mu.Unlock()
	want := []string{"put ready", "create tasks (failed)", "put ready", "create tasks"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("operations %q, want %q", got, want)
	}
	if w := e.waker.Calls(); len(w) != 1 || w[0].Key != tk.PointerKey() {
		t.Fatalf("wake-ups %+v", w)
	}

	// A create whose response is lost: the task exists; resubmitting finds
	// it.
	e.mem.Inject(memstore.Fault{Op: memstore.OpCreate, Prefix: TasksPrefix, When: memstore.AfterApply, Err: storage.ErrUnavailable, Times: 1})
	lost, _, err := e.cli.Submit(ctx, SubmitRequest{Type: "email", Input: json.RawMessage(`7`)})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Submit with a lost response: %v", err)
	}
	found, created, err := e.cli.Submit(ctx, SubmitRequest{ID: lost.ID, Type: "email", Input: json.RawMessage(`7`)})
	if err != nil || created || found.Ref() != lost.Ref() {
		t.Fatalf("resubmit after a lost response: %v created %v", err, created)
	}
}

func TestSubmitWakeFailureIsLogged(t *testing.T) {
	e := newEnv(t, 4)
	var logs bytes.Buffer
	e.waker.err = errors.New("owner unreachable")
	cli, err := NewClient(e.store, ClientConfig{Shards: 4, Waker: e.waker, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tk, created, err := cli.Submit(testCtx(t), SubmitRequest{Type: "email"})
	if err != nil || !created {
		t.Fatalf("Submit with a failing waker: %v, created %v; the task is durable, so no error", err, created)
	}
	if !strings.Contains(logs.String(), "wake-up failed") || !strings.Contains(logs.String(), "owner unreachable") || !strings.Contains(logs.String(), tk.Ref()) {
		t.Fatalf("log %q lacks the wake failure", logs.String())
	}
}

// TestSubmitWakeRetried: a wake-up that fails is tried again, up to three
// times within DefaultWakeTimeout: two failures and then a success log
// nothing; three failures are logged once, with the count.
func TestSubmitWakeRetried(t *testing.T) {
	e := newEnv(t, 4)
	var logs bytes.Buffer
	cli, err := NewClient(e.store, ClientConfig{Shards: 4, Waker: e.waker, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e.waker.mu.Lock()
	e.waker.failures = 2
	e.waker.mu.Unlock()
	if _, _, err := cli.Submit(testCtx(t), SubmitRequest{Type: "email"}); err != nil {
		t.Fatal(err)
	}
	if n := len(e.waker.Calls()); n != 3 || logs.Len() != 0 {
		t.Fatalf("two failures then a success: %d calls, log %q; want 3 calls and no log", n, logs.String())
	}
	e.waker.mu.Lock()
	e.waker.err = errors.New("owner unreachable")
	e.waker.mu.Unlock()
	start := time.Now()
	if _, _, err := cli.Submit(testCtx(t), SubmitRequest{Type: "email"}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > DefaultWakeTimeout+time.Second {
		t.Errorf("Submit with a failing waker took %s, want within the wake timeout %s", took, DefaultWakeTimeout)
	}
	if n := len(e.waker.Calls()); n != 6 {
		t.Fatalf("three failures: %d calls in all, want 6", n)
	}
	if c := strings.Count(logs.String(), "wake-up failed"); c != 1 || !strings.Contains(logs.String(), "tries=3") {
		t.Fatalf("log %q: want one wake-up failure, after 3 tries", logs.String())
	}
}

func TestSubmitValidation(t *testing.T) {
	e := newEnv(t, 4, WithMaxInputSize(16))
	big := json.RawMessage(`"` + strings.Repeat("x", 15) + `"`)
	cases := []struct {
		field string
		req   SubmitRequest
	}{
		{"type", SubmitRequest{}},
		{"type", SubmitRequest{Type: "a.b"}},
		{"id", SubmitRequest{Type: "t", ID: "a/b"}},
		{"id", SubmitRequest{Type: "t", ID: strings.Repeat("a", 257)}},
		{"entity", SubmitRequest{Type: "t", Entity: "a\x00b"}},
		{"entity", SubmitRequest{Type: "t", Entity: "\xff"}},
		{"input", SubmitRequest{Type: "t", Input: json.RawMessage(`{"a":`)}},
		{"SubmitRequest.Delay", SubmitRequest{Type: "t", Delay: -time.Second}},
		{"SubmitRequest.AvailableAt", SubmitRequest{Type: "t", Delay: time.Second, AvailableAt: t0}},
		{"SubmitRequest.AvailableAt", SubmitRequest{Type: "t", AvailableAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{"SubmitRequest.MaxAttempts", SubmitRequest{Type: "t", MaxAttempts: -1}},
		{"SubmitRequest.Timeout", SubmitRequest{Type: "t", Timeout: -1}},
		{"retry.multiplier", SubmitRequest{Type: "t", Retry: &RetryPolicy{Initial: 1, Max: 1}}},
	}
	for _, c := range cases {
		_, _, err := e.cli.Submit(testCtx(t), c.req)
		var ve *ValidationError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("Submit(%+v) = %v, want a *ValidationError on %s", c.req, err, c.field)
		}
	}
	_, _, err := e.cli.Submit(testCtx(t), SubmitRequest{Type: "t", Input: big})
	var te *InputTooLargeError
	if !errors.Is(err, ErrInputTooLarge) || !errors.Is(err, ErrInvalid) || !errors.As(err, &te) || te.Size != 17 || te.Limit != 16 || !strings.Contains(err.Error(), "16 bytes") {
		t.Fatalf("oversized input: %v", err)
	}
	if n := len(e.mem.CallCounts()); n != 0 {
		t.Fatalf("refused submits made requests: %v", e.mem.CallCounts())
	}
	if _, _, err := e.cli.Submit(testCtx(t), SubmitRequest{Type: "t", Input: big[1:]}); err == nil {
		t.Fatal("an input of 16 bytes that is not JSON must be refused")
	}
	if _, created, err := e.cli.Submit(testCtx(t), SubmitRequest{Type: "t", Input: json.RawMessage(`"` + strings.Repeat("x", 14) + `"`)}); err != nil || !created {
		t.Fatalf("an input of exactly the limit: %v", err)
	}
	// The default limit is 256 KiB.
	d := newEnv(t, 4)
	at := json.RawMessage(`"` + strings.Repeat("x", DefaultMaxInputSize-2) + `"`)
	if _, _, err := d.cli.Submit(testCtx(t), SubmitRequest{Type: "t", Input: at}); err != nil {
		t.Fatalf("256 KiB input: %v", err)
	}
	over := json.RawMessage(`"` + strings.Repeat("x", DefaultMaxInputSize-1) + `"`)
	if _, _, err := d.cli.Submit(testCtx(t), SubmitRequest{Type: "t", Input: over}); !errors.Is(err, ErrInputTooLarge) {
		t.Fatalf("256 KiB + 1 input: %v", err)
	}
}

func TestSubmitTrace(t *testing.T) {
	e := newEnv(t, 4)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	cli, err := NewClient(e.store, ClientConfig{Shards: 4, Tracer: tp.Tracer("test")})
	if err != nil {
		t.Fatal(err)
	}
	tk, _, err := cli.Submit(testCtx(t), SubmitRequest{Type: "email"})
	if err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "tenure.task.submit" {
		t.Fatalf("spans %v", spans)
	}
	sc := spans[0].SpanContext()
	if got := tk.SpanContext(); got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() {
		t.Fatalf("stored trace %q gives %v, want the submit span %v", tk.Trace, got, sc)
	}
	stored, _ := cli.Get(testCtx(t), tk.Ref())
	if stored.Trace != tk.Trace || !strings.HasPrefix(stored.Trace, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()) {
		t.Fatalf("stored trace %q", stored.Trace)
	}
	// A refused submit ends its span in error.
	cli.Submit(testCtx(t), SubmitRequest{Type: "bad.type"})
	if spans := rec.Ended(); len(spans) != 2 || spans[1].Status().Code != otelcodes.Error {
		t.Fatalf("refused submit's span: %+v", spans[len(spans)-1].Status())
	}
	if (&Task{}).SpanContext().IsValid() {
		t.Fatal("a task without a trace has a valid span context")
	}
	// Without a tracer the caller's span context is still kept.
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	tk, _, err = e.cli.Submit(trace.ContextWithSpanContext(testCtx(t), parent), SubmitRequest{Type: "email"})
	if err != nil || tk.SpanContext().TraceID() != parent.TraceID() || tk.SpanContext().SpanID() != parent.SpanID() {
		t.Fatalf("no-op tracer: %v, trace %q, want the caller's span", err, tk.Trace)
	}
}

func TestCancelPending(t *testing.T) {
	e := newEnv(t, 4)
	ctx := testCtx(t)
	tk := e.submit(t, SubmitRequest{Type: "email"})
	got, err := e.cli.Cancel(ctx, tk.Ref())
	if err != nil || got.Status != Cancelled || got.Rev != 2 || lastEvent(got).Event != EventCancelled {
		t.Fatalf("Cancel: %v %+v", err, got)
	}
	if ps := e.keys(t, ReadyPrefix); len(ps) != 0 {
		t.Fatalf("pointers %q left after cancelling a pending task", ps)
	}
	// Again: unchanged, no write.
	again, err := e.cli.Cancel(ctx, tk.Ref())
	if err != nil || again.Rev != 2 {
		t.Fatalf("second Cancel: %v rev %d", err, again.Rev)
	}
	if _, err := e.cli.Cancel(ctx, "default/0/missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Cancel of a missing task: %v", err)
	}
	if _, err := e.cli.Cancel(ctx, "not a ref"); !errors.Is(err, ErrMalformedKey) {
		t.Fatalf("Cancel of a bad ref: %v", err)
	}
}

func TestCancelRunning(t *testing.T) {
	e := newEnv(t, 4)
	ctx := testCtx(t)
	tk := e.submit(t, SubmitRequest{Type: "email"})
	e.claim(t, tk.Ref(), runnerA)
	got, err := e.cli.Cancel(ctx, tk.Ref())
	if err != nil || got.Status != Running || !got.CancelRequested || !got.HeldBy(runnerA) {
		t.Fatalf("Cancel of a running task: %v %+v", err, got)
	}
	// The owner was woken (after the submit's wake-up) to stop the handler.
	if w := e.waker.Calls(); len(w) != 2 || w[1].Shard != tk.Shard {
		t.Fatalf("wake-ups %+v", w)
	}
	if again, err := e.cli.Cancel(ctx, tk.Ref()); err != nil || again.Rev != got.Rev || len(e.waker.Calls()) != 3 {
		t.Fatalf("repeated Cancel: %v rev %d, %d wake-ups", err, again.Rev, len(e.waker.Calls()))
	}
	// The executor finishes it.
	cur, etag, _ := e.store.Load(ctx, tk.Shard, tk.ID)
	if err := cur.FinishCancel(e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Write(ctx, cur, etag); err != nil {
		t.Fatal(err)
	}
	if done, _ := e.cli.Get(ctx, tk.Ref()); done.Status != Cancelled {
		t.Fatalf("status %s", done.Status)
	}
	// A completed task cannot be cancelled.
	c := e.submit(t, SubmitRequest{Type: "email"})
	run, etag := e.claim(t, c.Ref(), runnerA)
	run.Complete(e.clock.Now(), nil)
	e.store.Write(ctx, run, etag)
	if got, err := e.cli.Cancel(ctx, c.Ref()); !errors.Is(err, ErrTerminal) || got == nil || got.Status != Completed {
		t.Fatalf("Cancel of a completed task: %v %+v", err, got)
	}
}

// touchOnReplace makes a concurrent writer change the task just before
// each of the first n replaces of its key that are not its own, so that the
// caller's compare-and-swap loses n times.
func touchOnReplace(t *testing.T, e *env, tk *Task, n int32, also func()) *atomic.Int32 {
	var inner atomic.Bool
	var touched atomic.Int32
	e.mem.SetHook(func(ctx context.Context, c memstore.Call) error {
		if c.Op != memstore.OpReplace || c.When != memstore.BeforeApply || c.Key != tk.Key() || inner.Load() || touched.Load() >= n {
			return nil
		}
		inner.Store(true)
		defer inner.Store(false)
		cur, etag, err := e.store.Load(ctx, tk.Shard, tk.ID)
		if err != nil {
			return err
		}
		if _, err := e.store.Write(ctx, cur, etag); err != nil {
			return err
		}
		touched.Add(1)
		if also != nil {
			also()
		}
		return nil
	})
	t.Cleanup(func() { e.mem.SetHook(nil) })
	return &touched
}

func TestCancelRetriesLostRaces(t *testing.T) {
	e := newEnv(t, 4)
	tk := e.submit(t, SubmitRequest{Type: "email"})
	touched := touchOnReplace(t, e, tk, 2, nil)
	got, err := e.cli.Cancel(testCtx(t), tk.Ref())
	if err != nil || got.Status != Cancelled || touched.Load() != 2 || got.Rev != 4 {
		t.Fatalf("Cancel racing 2 writers: %v, status %s, %d touches, rev %d", err, got.Status, touched.Load(), got.Rev)
	}
	// Writers that never stop win: the loop gives up with a typed error.
	tk = e.submit(t, SubmitRequest{Type: "email"})
	touchOnReplace(t, e, tk, 1000, nil)
	_, err = e.cli.Cancel(testCtx(t), tk.Ref())
	var ce *ContentionError
	if !errors.Is(err, ErrContention) || !errors.Is(err, storage.ErrPrecondition) || !errors.As(err, &ce) || ce.Tries != CASTries {
		t.Fatalf("Cancel against endless writers: %v", err)
	}
}

func TestReplay(t *testing.T) {
	e := newEnv(t, 4)
	ctx := testCtx(t)
	tk := e.submit(t, SubmitRequest{Type: "email", MaxAttempts: 1})
	run, etag := e.claim(t, tk.Ref(), runnerA)
	if _, final := run.Fail(e.clock.Now(), errors.New("boom"), false); !final {
		t.Fatal("the only attempt's failure must be final")
	}
	e.store.Write(ctx, run, etag)
	e.store.DeletePointer(ctx, tk.PointerKey()) // as the executor does
	e.clock.Advance(time.Minute)
	got, err := e.cli.Replay(ctx, tk.Ref())
	if err != nil || got.Status != Pending || got.Attempt != 0 || got.Error != "" || !got.AvailableAt.Equal(e.clock.Now()) {
		t.Fatalf("Replay: %v %+v", err, got)
	}
	if ps := e.keys(t, ReadyPrefix); !reflect.DeepEqual(ps, []string{got.PointerKey()}) {
		t.Fatalf("pointers %q, want the replayed task's", ps)
	}
	if w := e.waker.Calls(); w[len(w)-1].Key != got.PointerKey() {
		t.Fatalf("wake-ups %+v", w)
	}
	// The replayed task runs again.
	if again, _ := e.claim(t, tk.Ref(), runnerB); again.Attempt != 1 {
		t.Fatalf("attempt %d after replay", again.Attempt)
	}
	if _, err := e.cli.Replay(ctx, tk.Ref()); !errors.Is(err, ErrInvalidTransition) {
		t.Fatalf("Replay of a running task: %v", err)
	}
}

// TestReplayRace: a replay that loses a race writes a new pointer on its
// next try and deletes the stale one.
func TestReplayRace(t *testing.T) {
	e := newEnv(t, 4)
	ctx := testCtx(t)
	tk := e.submit(t, SubmitRequest{Type: "email"})
	c, err := e.cli.Cancel(ctx, tk.Ref())
	if err != nil {
		t.Fatal(err)
	}
	touched := touchOnReplace(t, e, c, 1, func() { e.clock.Advance(time.Second) })
	got, err := e.cli.Replay(ctx, tk.Ref())
	if err != nil || touched.Load() != 1 || got.Status != Pending || !got.AvailableAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("Replay racing a writer: %v %+v", err, got)
	}
	if ps := e.keys(t, ReadyPrefix); !reflect.DeepEqual(ps, []string{got.PointerKey()}) {
		t.Fatalf("pointers %q, want only %s", ps, got.PointerKey())
	}
}
