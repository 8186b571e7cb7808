package entity

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/sharding"
)

// cart is a defined type: its exported fields are its durable state, runs
// (unexported) counts the operations that ran.
type cart struct {
	Items   []string `json:"items"`
	Checked bool     `json:"checked"`
	runs    *atomic.Int32
}

func (c *cart) Add(_ Context, item string) (int, error) {
	c.runs.Add(1)
	if c.Checked {
		return 0, NewAppError(CodeConflict, "checked out")
	}
	c.Items = append(c.Items, item)
	return len(c.Items), nil
}

func (c *cart) List(_ Context) ([]string, error) { return c.Items, nil }

func (c *cart) Checkout(_ Context) error {
	c.runs.Add(1)
	c.Checked = true
	return nil
}

// Spoil changes the state and fails: the change must not stay.
func (c *cart) Spoil(_ Context, item string) error {
	c.Items = append(c.Items, item)
	return errors.New("asked to fail")
}

// OnStart is a hook, not an operation.
func (c *cart) OnStart(context.Context) error { return nil }

func defineCart(runs *atomic.Int32) *Definition {
	return Define("cart", func(string) *cart { return &cart{runs: runs} }, ReadOnly("list"), Default("Add"))
}

func (b *bareHost) invoke(ctx context.Context, typ, id, op, body string) (string, error) {
	d := b.delivery(typ, id, body)
	d.Op = op
	reply, err := b.Deliver(ctx, d)
	return string(reply), err
}

func mustInvoke(t testing.TB, b *bareHost, typ, id, op, body, want string) {
	t.Helper()
	got, err := b.invoke(ctxFor(t, 10*time.Second), typ, id, op, body)
	if err != nil || got != want {
		t.Fatalf("%s %s/%s %s = %q, %v; want %q", op, typ, id, body, got, err, want)
	}
}

// TestDefineOperations: the operations of a defined type run by name
// (any case) and by default; a writing operation's state is stored after
// it, fenced with the shard's epoch; a read-only one writes nothing; an
// unknown operation is bad input and runs nothing; an operation that
// fails leaves the state as it was saved, in memory and in S3.
func TestDefineOperations(t *testing.T) {
	e, ops := stateEnv(t)
	var runs atomic.Int32
	b := e.bareHost(func(h *Host) {
		if err := h.Define(defineCart(&runs)); err != nil {
			t.Fatal(err)
		}
	})
	b.own(shard0, 100)
	mustInvoke(t, b, "cart", "c1", "Add", `"apple"`, `1`)
	mustInvoke(t, b, "cart", "c1", "add", `"pear"`, `2`)
	mustInvoke(t, b, "cart", "c1", "", `"fig"`, `3`) // the default
	if got := ops.take(); got["put"] != 4 {          // the fence, then one per writing operation
		t.Fatalf("state requests after 3 adds: %v, want 4 puts", got)
	}
	mustInvoke(t, b, "cart", "c1", "List", ``, `["apple","pear","fig"]`)
	if got := ops.take(); got["put"] != 0 || got["get"] != 0 {
		t.Fatalf("a read-only operation made state requests: %v", got)
	}
	if _, err := b.invoke(ctxFor(t, 10*time.Second), "cart", "c1", "Spoil", `"rot"`); err == nil || !strings.Contains(err.Error(), "asked to fail") {
		t.Fatalf("Spoil: %v", err)
	}
	mustInvoke(t, b, "cart", "c1", "List", ``, `["apple","pear","fig"]`)
	_, err := b.invoke(ctxFor(t, 10*time.Second), "cart", "c1", "Remove", `"fig"`)
	var unknown *UnknownOpError
	if !errors.As(err, &unknown) || !errors.Is(err, ErrBadInput) || unknown.Op != "Remove" || len(unknown.Ops) != 4 {
		t.Fatalf("unknown operation: %v", err)
	}
	if _, err := b.invoke(ctxFor(t, 10*time.Second), "cart", "c1", "Add", `{"not":"a string"}`); !errors.Is(err, ErrBadInput) {
		t.Fatalf("input of the wrong type: %v, want ErrBadInput", err)
	}
	mustInvoke(t, b, "cart", "c1", "Checkout", ``, ``)
	var ae *AppError
	if _, err := b.invoke(ctxFor(t, 10*time.Second), "cart", "c1", "Add", `"late"`); !errors.As(err, &ae) || ae.Code != CodeConflict {
		t.Fatalf("add after checkout: %v, want the application's conflict", err)
	}
	env := e.stored("cart", "c1")
	var st cart
	if err := json.Unmarshal(env.State, &st); err != nil {
		t.Fatal(err)
	}
	if env.Epoch != 100 || !st.Checked || strings.Join(st.Items, ",") != "apple,pear,fig" {
		t.Fatalf("stored: epoch %d, %s", env.Epoch, env.State)
	}
}

// TestDefineTaskExactlyOnce: a task naming an operation changes the state
// once even when its owner crashes between the state write and the
// task's commit: the successor completes it with the recorded result.
func TestDefineTaskExactlyOnce(t *testing.T) {
	e, ops := stateEnv(t)
	var runs atomic.Int32
	host := func() *bareHost {
		return e.bareHost(func(h *Host) {
			if err := h.Define(defineCart(&runs)); err != nil {
				t.Fatal(err)
			}
		})
	}
	a, b := host(), host()
	ops.holdCommits.Store(true)
	oa := a.own(shard0, 100)
	tk := e.submit(task.SubmitRequest{Type: "cart", Entity: "c1", Op: "Add", Input: json.RawMessage(`"apple"`)})
	select {
	case <-ops.held:
	case <-ctxFor(t, 20*time.Second).Done():
		t.Fatal("the task's commit never came")
	}
	oa.end(sharding.LossLockLost)
	a.ShardLost(oa.Ownership, sharding.LossLockLost)
	ops.holdCommits.Store(false)

	b.own(shard0, 101)
	done := e.final(tk.Ref(), 30*time.Second)
	if done.Status != task.Completed || string(done.Result) != `1` {
		t.Fatalf("task: %s %s", done.Status, done.Result)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("Add ran %d times, want 1", n)
	}
	mustInvoke(t, b, "cart", "c1", "list", ``, `["apple"]`)
}

// TestDefineRejects: definition errors are reported at registration and
// name the type and the method.
func TestDefineRejects(t *testing.T) {
	var h Types
	for _, c := range []struct {
		d    *Definition
		want string
	}{
		{Define[struct{ N int }]("none", nil), "has no operations"},
		{Define[badArgs]("args", nil), "Two takes 2 arguments"},
		{Define[badResults]("results", nil), "must return (Out, error) or error"},
		{Define("cart", func(string) *cart { return &cart{} }, ReadOnly("Nope")), `ReadOnly("Nope"): no such operation`},
		{Define("cart", func(string) *cart { return &cart{} }, Default("Nope")), `Default("Nope"): no such operation`},
	} {
		err := h.Define(c.d)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.d.Name(), err, c.want)
		}
	}
	if names := h.Names(); len(names) != 0 {
		t.Fatalf("registered despite errors: %v", names)
	}
	if d := Define[volatileOnly]("v", nil); d.Durable() {
		t.Fatal("a type without JSON fields is durable")
	}
	if d := Define("cart", func(string) *cart { return &cart{} }, Volatile()); d.Durable() {
		t.Fatal("Volatile did not make the type volatile")
	}
}

type badArgs struct{}

func (badArgs) Two(Context, int, int) error { return nil }

type badResults struct{}

func (badResults) NoErr(Context) int { return 0 }

type volatileOnly struct{ n int }

func (v *volatileOnly) Inc(Context) (int, error) { v.n++; return v.n, nil }

// mark is a durable type whose Touch writes nothing new.
type mark struct{ N int }

func (m *mark) Touch(Context) error { return nil }

func (m *mark) Inc(Context) (int, error) { m.N++; return m.N, nil }

// TestDefineUnchangedSavesNothing: a writing operation that leaves the
// state as it was saves nothing, on an entity with no stored state too
// (its first operation); one that changes it saves once.
func TestDefineUnchangedSavesNothing(t *testing.T) {
	e, ops := stateEnv(t)
	b := e.bareHost(func(h *Host) {
		if err := h.Define(Define[mark]("mark", nil)); err != nil {
			t.Fatal(err)
		}
	})
	b.own(shard0, 100)
	ops.take()
	mustInvoke(t, b, "mark", "m1", "Touch", ``, ``)
	if got := ops.take(); got["put"] != 1 { // the activation's fence only
		t.Fatalf("state requests of a first Touch: %v, want the fence's one put", got)
	}
	mustInvoke(t, b, "mark", "m1", "Touch", ``, ``)
	if got := ops.take(); got["put"] != 0 {
		t.Fatalf("state requests of a second Touch: %v, want none", got)
	}
	mustInvoke(t, b, "mark", "m1", "Inc", ``, `1`)
	if got := ops.take(); got["put"] != 1 {
		t.Fatalf("state requests of an Inc: %v, want one put", got)
	}
}

// TestDefineCallsOnlyOnAttachedHolder: an operation of a defined type runs
// only on the holder of its shard's lock while attached: once the runner
// detaches, a call is refused (not attached) without running; on a host
// that lost the shard, it is refused as not the owner.
func TestDefineCallsOnlyOnAttachedHolder(t *testing.T) {
	e, _ := stateEnv(t)
	var runs atomic.Int32
	b := e.bareHost(func(h *Host) {
		if err := h.Define(defineCart(&runs)); err != nil {
			t.Fatal(err)
		}
	})
	o := b.own(shard0, 7)
	mustInvoke(t, b, "cart", "c1", "Add", `"apple"`, `1`)
	o.detach(errors.New("test detaches"))
	_, err := b.invoke(ctxFor(t, 10*time.Second), "cart", "c1", "Add", `"pear"`)
	refusedAs(t, err, RefusedNotAttached, 7)
	o.end(sharding.LossLockLost)
	b.ShardLost(o.Ownership, sharding.LossLockLost)
	_, err = b.invoke(ctxFor(t, 10*time.Second), "cart", "c1", "Add", `"fig"`)
	refusedAs(t, err, RefusedNotOwner, 0)
	if n := runs.Load(); n != 1 {
		t.Fatalf("Add ran %d times, want only the attached holder's 1", n)
	}
}
