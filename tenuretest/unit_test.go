package tenuretest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/tenuretest"
)

func newShop(t *testing.T) (*tenuretest.Unit, *hooks) {
	h := &hooks{}
	return tenuretest.New(t, defineCart(h), ledgerType), h
}

func add(t *testing.T, u *tenuretest.Unit, id string, it Item) Summary {
	t.Helper()
	s, err := tenuretest.Call[Summary](u, "cart", id, "Add", it)
	if err != nil {
		t.Fatalf("Add %+v to %s: %v", it, id, err)
	}
	return s
}

// TestCartAddListCheckout: operations run with their state; the state is
// saved after each writing operation that changed it, and Checkout's call
// to the ledger reaches it.
func TestCartAddListCheckout(t *testing.T) {
	u, h := newShop(t)
	if s := add(t, u, "alice", Item{SKU: "a", Price: 3}); s != (Summary{Items: 1, Total: 3}) {
		t.Fatalf("first Add: %+v", s)
	}
	add(t, u, "alice", Item{SKU: "b", Price: 4})
	items, err := tenuretest.Call[[]Item](u, "cart", "alice", "List", nil)
	if err != nil || len(items) != 2 || items[1].SKU != "b" {
		t.Fatalf("List: %+v, %v", items, err)
	}
	if n := u.Saves("cart", "alice"); n != 2 {
		t.Fatalf("%d saves after two Adds and a List, want 2", n)
	}
	sum, err := tenuretest.Call[Summary](u, "cart", "alice", "Checkout", nil)
	if err != nil || sum.Total != 7 {
		t.Fatalf("Checkout: %+v, %v", sum, err)
	}
	if st := tenuretest.State[Cart](u, "cart", "alice"); !st.CheckedOut || len(st.Items) != 2 {
		t.Fatalf("saved cart %+v", st)
	}
	if l := tenuretest.State[Ledger](u, "ledger", "shop"); l.Total != 7 || l.Entries != 1 {
		t.Fatalf("saved ledger %+v", l)
	}
	// An application error travels as it was returned.
	_, err = u.Do("cart", "alice", "Add", Item{SKU: "c", Price: 1})
	var ae *entity.AppError
	if !errors.As(err, &ae) || ae.Code != entity.CodeConflict {
		t.Fatalf("Add after Checkout: %v, want the conflict AppError", err)
	}
	if h.started() != 1 {
		t.Fatalf("OnStart ran %d times for one activation", h.started())
	}
	// The Unit is a Caller: an entity.Operation runs against it as against
	// a runner's client; "" is the type's default (List).
	listOp := entity.Operation[struct{}, []Item]{Type: "cart"}
	if got, err := listOp.Call(context.Background(), u, "alice", struct{}{}); err != nil || len(got) != 2 {
		t.Fatalf("default operation through Operation.Call: %+v, %v", got, err)
	}
}

// TestAbandonReminder: Add arms "abandon" 30 minutes ahead and re-arms it
// on each Add; it does not fire before it is due, fires once when it is,
// with the clock at its due time, and Checkout cancels it.
func TestAbandonReminder(t *testing.T) {
	u, _ := newShop(t)
	t0 := u.Now()
	add(t, u, "alice", Item{SKU: "a", Price: 3})
	if err := u.Advance(10 * time.Minute); err != nil {
		t.Fatal(err)
	}
	add(t, u, "alice", Item{SKU: "b", Price: 4}) // re-armed: due at t0+40m now
	rs := u.Reminders("cart", "alice")
	if len(rs) != 1 || rs[0].Name != "abandon" || rs[0].Op != "Abandon" || !rs[0].Due.Equal(t0.Add(40*time.Minute)) {
		t.Fatalf("reminders after the second Add: %+v", rs)
	}
	if err := u.Advance(29 * time.Minute); err != nil {
		t.Fatal(err)
	}
	if st := tenuretest.State[Cart](u, "cart", "alice"); len(st.Items) != 2 || !st.AbandonedAt.IsZero() {
		t.Fatalf("cart abandoned early: %+v", st)
	}
	if err := u.Advance(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	st := tenuretest.State[Cart](u, "cart", "alice")
	if len(st.Items) != 0 || !st.AbandonedAt.Equal(t0.Add(40*time.Minute)) {
		t.Fatalf("after the reminder: %+v, want empty, abandoned at %s", st, t0.Add(40*time.Minute))
	}
	if got := u.Now(); !got.Equal(t0.Add(41 * time.Minute)) {
		t.Fatalf("clock %s, want %s", got, t0.Add(41*time.Minute))
	}
	if rs := u.Reminders("cart", "alice"); len(rs) != 0 {
		t.Fatalf("reminders left after firing: %+v", rs)
	}
	// Abandon's send reached the ledger before Advance returned.
	if l := tenuretest.State[Ledger](u, "ledger", "shop"); l.Abandoned != 1 {
		t.Fatalf("ledger %+v, want one abandoned cart", l)
	}
	if err := u.Advance(time.Hour); err != nil {
		t.Fatal(err)
	}
	if l := tenuretest.State[Ledger](u, "ledger", "shop"); l.Abandoned != 1 {
		t.Fatalf("the reminder fired twice: ledger %+v", l)
	}

	// Checkout cancels it.
	add(t, u, "bob", Item{SKU: "a", Price: 1})
	if _, err := u.Do("cart", "bob", "Checkout", nil); err != nil {
		t.Fatal(err)
	}
	if rs := u.Reminders("cart", "bob"); len(rs) != 0 {
		t.Fatalf("reminders after Checkout: %+v", rs)
	}
	if err := u.Advance(time.Hour); err != nil {
		t.Fatal(err)
	}
	if st := tenuretest.State[Cart](u, "cart", "bob"); len(st.Items) != 1 {
		t.Fatalf("checked-out cart abandoned: %+v", st)
	}
}

// TestReminderOrderAndErrors: reminders fire in due order across entities;
// a failing one is reported by Advance, naming it, and the others fire.
func TestReminderOrderAndErrors(t *testing.T) {
	u, _ := newShop(t)
	add(t, u, "c1", Item{SKU: "a", Price: 1})
	if err := u.Advance(time.Minute); err != nil {
		t.Fatal(err)
	}
	add(t, u, "c2", Item{SKU: "a", Price: 1})
	add(t, u, "c3", Item{SKU: "a", Price: 1})
	// c3's saved state no longer decodes: its reminder fails to activate it.
	u.PutState("cart", "c3", map[string]any{"items": "not a list"})
	u.PutState("cart", "c1", Cart{Items: []Item{{SKU: "x", Price: 9}}}) // c1's reminder stays across PutState
	err := u.Advance(time.Hour)
	if !errors.Is(err, entity.ErrNotStarted) || !strings.Contains(err.Error(), `reminder "abandon" of cart/c3`) {
		t.Fatalf("Advance: %v, want c3's reminder's error", err)
	}
	a1, a2 := tenuretest.State[Cart](u, "cart", "c1").AbandonedAt, tenuretest.State[Cart](u, "cart", "c2").AbandonedAt
	if !a1.Before(a2) || a2.Sub(a1) != time.Minute {
		t.Fatalf("abandoned at %s and %s, want c1 a minute before c2", a1, a2)
	}
	// Abandon outside its reminder is refused: Task runs it as a plain task.
	if _, err := u.Task("cart", "c1", "Abandon", nil); err == nil {
		t.Fatal("Abandon as a plain task succeeded")
	}
	if _, err := u.Do("cart", "c3", "List", nil); !errors.Is(err, entity.ErrNotStarted) || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("activating a cart whose state does not decode: %v", err)
	}
}

// TestPassivationKeepsState: a passivated entity comes back from its saved
// state alone; OnStop and OnStart run as on a runner.
func TestPassivationKeepsState(t *testing.T) {
	u, h := newShop(t)
	add(t, u, "alice", Item{SKU: "a", Price: 3})
	if !u.Active("cart", "alice") {
		t.Fatal("not active after an operation")
	}
	u.Passivate("cart", "alice")
	if u.Active("cart", "alice") {
		t.Fatal("active after Passivate")
	}
	if got := h.stopped(); !slices.Equal(got, []entity.StopReason{entity.StopIdle}) {
		t.Fatalf("OnStop reasons %v", got)
	}
	s := add(t, u, "alice", Item{SKU: "b", Price: 4})
	if s != (Summary{Items: 2, Total: 7}) || h.started() != 2 {
		t.Fatalf("after reactivation: %+v, %d starts", s, h.started())
	}
	// The reminder is durable: it fires on the passivated entity.
	u.Passivate("cart", "alice")
	if err := u.Advance(abandonAfter); err != nil {
		t.Fatal(err)
	}
	if st := tenuretest.State[Cart](u, "cart", "alice"); len(st.Items) != 0 || st.AbandonedAt.IsZero() {
		t.Fatalf("reminder on a passivated cart: %+v", st)
	}
}

// TestFailingOperationLeavesState: an operation that changed the state and
// failed leaves the saved state and the instance's value as they were; a
// panic is an *entity.PanicError and discards the instance.
func TestFailingOperationLeavesState(t *testing.T) {
	u, h := newShop(t)
	add(t, u, "alice", Item{SKU: "a", Price: 3})
	before := u.SavedState("cart", "alice")
	_, err := u.Do("cart", "alice", "Add", Item{SKU: "free", Price: 0})
	var ae *entity.AppError
	if !errors.As(err, &ae) || ae.Code != entity.CodeInvalid {
		t.Fatalf("Add with price 0: %v", err)
	}
	if got := u.SavedState("cart", "alice"); string(got) != string(before) || u.Saves("cart", "alice") != 1 {
		t.Fatalf("saved state %s after a failed Add, want %s", got, before)
	}
	if items, _ := tenuretest.Call[[]Item](u, "cart", "alice", "List", nil); len(items) != 1 {
		t.Fatalf("in memory after a failed Add: %+v", items)
	}

	_, err = u.Do("cart", "alice", "Boom", nil)
	var pe *entity.PanicError
	if !errors.As(err, &pe) || pe.Value != "boom" || pe.Stack == "" {
		t.Fatalf("Boom: %v, want a PanicError", err)
	}
	if u.Active("cart", "alice") || !slices.Contains(h.stopped(), entity.StopFailed) {
		t.Fatalf("instance after a panic: active %v, stops %v", u.Active("cart", "alice"), h.stopped())
	}
	if items, _ := tenuretest.Call[[]Item](u, "cart", "alice", "List", nil); len(items) != 1 {
		t.Fatalf("after the panic: %+v", items)
	}
}

// TestReadOnlyDoesNotSave: a read-only operation is never followed by a
// save, nor is a writing one that changed nothing.
func TestReadOnlyDoesNotSave(t *testing.T) {
	u, _ := newShop(t)
	for range 3 {
		if _, err := u.Do("cart", "alice", "List", nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := u.Saves("cart", "alice"); n != 0 || u.SavedState("cart", "alice") != nil {
		t.Fatalf("%d saves after reads", n)
	}
	// The default operation (List) through the Caller interface, bytes in.
	if out, err := u.Call(context.Background(), "cart", "alice", nil); err != nil || string(out) != "null" {
		t.Fatalf("default: %s, %v", out, err)
	}
	add(t, u, "alice", Item{SKU: "a", Price: 1})
	if _, err := u.Do("cart", "alice", "Audit", nil); !errors.Is(err, tenuretest.ErrCallCycle) {
		t.Fatalf("Audit (cart → ledger → cart): %v, want ErrCallCycle", err)
	}
	if n := u.Saves("cart", "alice"); n != 1 {
		t.Fatalf("%d saves, want 1", n)
	}
}

// TestErrors: unknown types and operations, bad input, a bad definition.
func TestErrors(t *testing.T) {
	u, _ := newShop(t)
	if _, err := u.Do("nope", "x", "", nil); !errors.Is(err, entity.ErrNoHandler) || !strings.Contains(err.Error(), "cart, ledger") {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := u.Do("cart", "alice", "Fly", nil); !errors.Is(err, entity.ErrUnknownOp) {
		t.Fatalf("unknown op: %v", err)
	}
	if _, err := u.Do("cart", "alice", "Add", "not an item"); !errors.Is(err, entity.ErrBadInput) {
		t.Fatalf("bad input: %v", err)
	}
	if _, err := u.Do("cart", "", "List", nil); !errors.Is(err, entity.ErrBadInput) {
		t.Fatalf("empty id: %v", err)
	}
	if err := u.Send(context.Background(), "nope", "x", nil); !errors.Is(err, entity.ErrNoHandler) {
		t.Fatalf("send to an unknown type: %v", err)
	}
	if err := u.Advance(-time.Second); err == nil {
		t.Fatal("Advance back in time succeeded")
	}
	// A send whose operation fails is kept, not returned.
	if err := u.Send(context.Background(), "cart", "alice", []byte(`"x"`)); err != nil {
		t.Fatal(err)
	}
	if errs := u.SendErrors(); len(errs) != 0 {
		t.Fatalf("List with an ignored input failed: %v", errs)
	}
	msg := &entity.Message{Type: "cart", ID: "alice", Op: "Abandon", OneWay: true}
	if _, err := u.Invoke(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if errs := u.SendErrors(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "Abandon runs from its reminder only") {
		t.Fatalf("send errors %v", errs)
	}

	bad := &fakeTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		tenuretest.New(bad, entity.Define[struct{ X int }]("bad", nil))
	}()
	if !strings.Contains(bad.fatal, "no operations") {
		t.Fatalf("a definition without operations: %q", bad.fatal)
	}
}

// TestOneAtATime: operations of one entity never overlap, even from many
// goroutines; every Add lands.
func TestOneAtATime(t *testing.T) {
	u, _ := newShop(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := u.Do("cart", "alice", "Add", Item{SKU: string(rune('a' + i)), Price: 1}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if st := tenuretest.State[Cart](u, "cart", "alice"); len(st.Items) != 20 || u.Saves("cart", "alice") != 20 {
		t.Fatalf("%d items, %d saves after 20 concurrent Adds", len(st.Items), u.Saves("cart", "alice"))
	}
	var raw json.RawMessage = u.SavedState("cart", "alice")
	if !json.Valid(raw) {
		t.Fatalf("saved state %s", raw)
	}
}

// fakeTB records a Fatalf and stops the function that called it.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	panic(f)
}

// TestCancelledContext: an operation whose caller gave up before it
// started does not run.
func TestCancelledContext(t *testing.T) {
	u, _ := newShop(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	addOp := entity.Operation[Item, Summary]{Type: "cart", Name: "Add"}
	if _, err := addOp.Call(ctx, u, "alice", Item{SKU: "a", Price: 1}); !errors.Is(err, entity.ErrNotStarted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Add with a cancelled context: %v", err)
	}
	if u.Saves("cart", "alice") != 0 || u.Active("cart", "alice") {
		t.Fatal("the cancelled Add ran")
	}
}
