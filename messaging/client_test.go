package messaging_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/messaging"
)

func TestCallRoutesToOwner(t *testing.T) {
	testenv.CheckLeaks(t)
	a, b := &fake{name: "a"}, &fake{name: "b"}
	v := newView()
	v.runner("a", serve(t, a))
	v.runner("b", serve(t, b))
	v.lock("b", 7)
	c, reg := v.client(t)

	got, err := c.Call(ctxT(t), "echo", "e1", []byte(`{"x":1}`))
	if err != nil || string(got) != `b:{"x":1}` {
		t.Fatalf("Call: %q, %v; want b's echo", got, err)
	}
	if a.count.Load() != 0 || b.count.Load() != 1 {
		t.Fatalf("deliveries: a %d, b %d; want 0, 1", a.count.Load(), b.count.Load())
	}
	d := b.lastDelivery()
	if d.Type != "echo" || d.ID != "e1" || d.Shard != shard0 || d.Epoch != 7 || d.OneWay {
		t.Fatalf("delivery %+v: want echo/e1 on %s at epoch 7, not one-way", d, shard0)
	}
	if err := c.Send(ctxT(t), "echo", "e1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if d := b.lastDelivery(); !d.OneWay {
		t.Fatal("Send delivered a message without OneWay")
	}
	if n := counter(t, reg, "tenure_calls_total", map[string]string{"kind": "call", "outcome": "ok"}); n != 1 {
		t.Fatalf("tenure_calls_total{call,ok} = %v, want 1", n)
	}
}

func TestLocalPathSkipsNetwork(t *testing.T) {
	testenv.CheckLeaks(t)
	remote, local := &fake{name: "remote"}, &fake{name: "local"}
	v := newView()
	v.runner("self", serve(t, remote)) // the same runner's call address: must not be used
	v.lock("self", 3)
	c, _ := v.client(t, messaging.WithLocal("self", local))

	got, err := c.Call(ctxT(t), "echo", "e1", []byte("hi"))
	if err != nil || string(got) != "local:hi" {
		t.Fatalf("Call: %q, %v; want the local echo", got, err)
	}
	if remote.count.Load() != 0 || local.count.Load() != 1 {
		t.Fatalf("deliveries: remote %d, local %d; want 0, 1", remote.count.Load(), local.count.Load())
	}
	if d := local.lastDelivery(); d.Epoch != 3 || d.Shard != shard0 {
		t.Fatalf("local delivery %+v: want epoch 3 on %s", d, shard0)
	}
}

// refuser refuses every delivery as not-owner, signalling each on refused.
func refuser(refused chan<- struct{}) func(context.Context, entity.Delivery) ([]byte, error) {
	return func(_ context.Context, d entity.Delivery) ([]byte, error) {
		select {
		case refused <- struct{}{}:
		default:
		}
		return nil, &entity.RefusedError{Reason: entity.RefusedNotOwner, Shard: d.Shard}
	}
}

func TestRefusalReroutesAfterTableChange(t *testing.T) {
	testenv.CheckLeaks(t)
	refused := make(chan struct{}, 1)
	a, b := &fake{name: "a", fn: refuser(refused)}, &fake{name: "b"}
	v := newView()
	v.runner("a", serve(t, a))
	v.runner("b", serve(t, b))
	v.lock("a", 5)
	c, reg := v.client(t)

	done := goCall(ctxT(t), c, "e1")
	<-refused
	v.lock("b", 9)
	r := <-done
	if r.err != nil || string(r.body) != "b:hi" {
		t.Fatalf("Call: %q, %v; want b's reply", r.body, r.err)
	}
	if b.count.Load() != 1 || b.lastDelivery().Epoch != 9 {
		t.Fatalf("b: %d deliveries, last at epoch %d; want 1 at 9", b.count.Load(), b.lastDelivery().Epoch)
	}
	if n := counter(t, reg, "tenure_call_reroutes_total", map[string]string{"reason": "not-owner"}); n < 1 {
		t.Fatalf("tenure_call_reroutes_total{not-owner} = %v, want ≥ 1", n)
	}
}

func TestRefusalFollowsHint(t *testing.T) {
	testenv.CheckLeaks(t)
	b := &fake{name: "b"}
	bAddr := serve(t, b)
	// a's own view already has b as the holder; the caller's does not.
	av := newView()
	av.runner("b", bAddr)
	av.lock("b", 9)
	a := &fake{name: "a", fn: refuser(make(chan struct{}, 1))}
	v := newView()
	v.runner("a", serve(t, a, messaging.WithTable(av.tbl)))
	v.runner("b", bAddr)
	v.lock("a", 5)
	c, _ := v.client(t)

	got, err := c.Call(ctxT(t), "echo", "e1", []byte("hi"))
	if err != nil || string(got) != "b:hi" {
		t.Fatalf("Call: %q, %v; want b's reply through a's hint", got, err)
	}
	if a.count.Load() != 1 || b.count.Load() != 1 || b.lastDelivery().Epoch != 9 {
		t.Fatalf("deliveries: a %d, b %d (epoch %d); want 1, 1 at epoch 9", a.count.Load(), b.count.Load(), b.lastDelivery().Epoch)
	}
}

func TestRefusedUntilDeadline(t *testing.T) {
	testenv.CheckLeaks(t)
	refused := make(chan struct{}, 16)
	a := &fake{name: "a", fn: refuser(refused)}
	v := newView()
	v.runner("a", serve(t, a))
	v.lock("a", 5)
	c, reg := v.client(t)
	ctx, cancel := context.WithTimeout(ctxT(t), 3*time.Second)
	defer cancel()
	// The deadline must end the call between its attempts: one in flight
	// at the deadline ends "outcome unknown", rightly, and a loaded
	// machine can stretch an attempt over most of a short deadline. So
	// once the runner has refused twice (the client retried after a
	// backoff), the shard loses its holder in the table: the client waits
	// for a holder, with a refusal as its last answer, until the deadline.
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		for range 2 {
			select {
			case <-refused:
			case <-ctx.Done():
				return
			}
		}
		v.unlock()
	}()
	_, err := c.Call(ctx, "echo", "e1", nil)
	<-moved
	if !errors.Is(err, entity.ErrRefused) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call: %v; want a refusal at the deadline", err)
	}
	if a.count.Load() < 2 {
		t.Fatalf("a saw %d attempts; want retries", a.count.Load())
	}
	if n := counter(t, reg, "tenure_calls_total", map[string]string{"outcome": "refused"}); n != 1 {
		t.Fatalf("tenure_calls_total{refused} = %v, want 1", n)
	}
}

func TestNoOwnerWaitsForOne(t *testing.T) {
	testenv.CheckLeaks(t)
	b := &fake{name: "b"}
	v := newView()
	v.runner("b", serve(t, b))
	c, reg := v.client(t)

	done := goCall(ctxT(t), c, "e1")
	testenv.WaitFor(t, "the call to wait for an owner", 10*time.Second, func() bool {
		return counter(t, reg, "tenure_call_reroutes_total", map[string]string{"reason": "no-owner"}) == 1
	})
	v.lock("b", 4)
	if r := <-done; r.err != nil {
		t.Fatalf("Call: %v", r.err)
	}
	if b.count.Load() != 1 {
		t.Fatalf("b: %d deliveries, want 1", b.count.Load())
	}
}

func TestNoOwnerTimesOut(t *testing.T) {
	testenv.CheckLeaks(t)
	v := newView()
	c, reg := v.client(t)
	ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
	defer cancel()
	_, err := c.Call(ctx, "echo", "e1", nil)
	if !errors.Is(err, messaging.ErrNoOwner) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call: %v; want ErrNoOwner at the deadline", err)
	}
	if n := counter(t, reg, "tenure_calls_total", map[string]string{"outcome": "timeout"}); n != 1 {
		t.Fatalf("tenure_calls_total{timeout} = %v, want 1", n)
	}
}

func TestNotSentIsRetried(t *testing.T) {
	testenv.CheckLeaks(t)
	b := &fake{name: "b"}
	v := newView()
	v.runner("dead", deadAddr(t))
	v.runner("b", serve(t, b))
	v.lock("dead", 5)
	c, reg := v.client(t)

	done := goCall(ctxT(t), c, "e1")
	testenv.WaitFor(t, "an attempt that was not sent", 10*time.Second, func() bool {
		return counter(t, reg, "tenure_call_reroutes_total", map[string]string{"reason": "not-sent"}) >= 1
	})
	v.lock("b", 6)
	if r := <-done; r.err != nil {
		t.Fatalf("Call: %v", r.err)
	}
	if b.count.Load() != 1 {
		t.Fatalf("b: %d deliveries, want 1", b.count.Load())
	}
}

func TestOutcomeUnknownIsNotRetried(t *testing.T) {
	testenv.CheckLeaks(t)
	entered := make(chan struct{})
	b := &fake{name: "b", fn: func(ctx context.Context, _ entity.Delivery) ([]byte, error) {
		close(entered)
		<-ctx.Done() // the broken connection cancels the handler
		return nil, ctx.Err()
	}}
	proxy := testenv.NewProxy(t, serve(t, b))
	v := newView()
	v.runner("b", proxy.Addr())
	v.lock("b", 5)
	c, reg := v.client(t)

	done := goCall(ctxT(t), c, "e1")
	<-entered
	proxy.SetMode(testenv.Reset)
	err := (<-done).err
	if !errors.Is(err, messaging.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call: %v; want ErrOutcomeUnknown", err)
	}
	if b.count.Load() != 1 {
		t.Fatalf("b: %d deliveries, want exactly 1", b.count.Load())
	}
	if n := counter(t, reg, "tenure_calls_total", map[string]string{"outcome": "unknown"}); n != 1 {
		t.Fatalf("tenure_calls_total{unknown} = %v, want 1", n)
	}
}

func TestDeadlineAndCancelTravel(t *testing.T) {
	testenv.CheckLeaks(t)
	seen := make(chan time.Time, 1)
	cancelled := make(chan error, 1)
	entered := make(chan struct{}, 1)
	b := &fake{name: "b", fn: func(ctx context.Context, d entity.Delivery) ([]byte, error) {
		if d.ID == "deadline" {
			dl, _ := ctx.Deadline()
			seen <- dl
			return nil, nil
		}
		entered <- struct{}{}
		<-ctx.Done()
		cancelled <- ctx.Err()
		return nil, ctx.Err()
	}}
	v := newView()
	v.runner("b", serve(t, b))
	v.lock("b", 5)
	c, _ := v.client(t)

	want := time.Now().Add(5 * time.Second)
	ctx, cancel := context.WithDeadline(ctxT(t), want)
	defer cancel()
	if _, err := c.Call(ctx, "echo", "deadline", nil); err != nil {
		t.Fatal(err)
	}
	// grpc sends the time left, rounded up to its timeout unit.
	if dl := <-seen; dl.IsZero() || dl.Sub(want).Abs() > time.Second {
		t.Fatalf("handler's deadline %v; want about %v", dl, want)
	}

	ctx, cancel = context.WithCancel(ctxT(t))
	done := goCall(ctx, c, "cancel")
	<-entered
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler's context ended with %v, want Canceled", err)
	}
	if err := (<-done).err; !errors.Is(err, context.Canceled) {
		t.Fatalf("Call: %v, want Canceled", err)
	}
}

func TestOversizedRefusedBeforeSending(t *testing.T) {
	testenv.CheckLeaks(t)
	b := &fake{name: "b"}
	v := newView()
	v.runner("b", serve(t, b))
	v.lock("b", 5)
	cfg := testConfig()
	cfg.MaxMessageBytes = 16
	c, err := messaging.NewClient(v.tbl, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Call(ctxT(t), "echo", "e1", bytes.Repeat([]byte("x"), 17))
	var tl *messaging.TooLargeError
	if !errors.Is(err, messaging.ErrTooLarge) || !errors.As(err, &tl) || tl.Size != 17 || tl.Limit != 16 {
		t.Fatalf("Call: %v; want a TooLargeError of 17 over 16", err)
	}
	if b.count.Load() != 0 {
		t.Fatalf("b: %d deliveries, want 0", b.count.Load())
	}
	if _, err := c.Call(ctxT(t), "echo", "e1", bytes.Repeat([]byte("x"), 16)); err != nil {
		t.Fatalf("Call at the limit: %v", err)
	}
}

// clientOf is a client whose one runner "b", holding every shard, delivers
// to f: through the local path when local, else over the network.
func clientOf(t *testing.T, f *fake, local bool) *messaging.Client {
	v := newView()
	var opts []messaging.Option
	if local {
		opts = append(opts, messaging.WithLocal("b", f))
		v.runner("b", deadAddr(t))
	} else {
		v.runner("b", serve(t, f))
	}
	v.lock("b", 5)
	c, _ := v.client(t, opts...)
	return c
}

func TestFailuresMapToTypedErrors(t *testing.T) {
	testenv.CheckLeaks(t)
	app := entity.NewAppError("checked_out", "cart c1 is checked out").WithDetails(map[string]string{"cart": "c1"}).WithStatus(409)
	errs := map[string]error{
		"unknown":  fmt.Errorf("%w: %q", entity.ErrNoHandler, "nope"),
		"badinput": fmt.Errorf("decoding: %w", entity.ErrBadInput),
		"panic":    &entity.PanicError{Value: "boom"},
		"handler":  errors.New("handler says no"),
		// A handler's own timeout is its error, not the caller's deadline.
		"owntimeout": fmt.Errorf("fetching: %w", context.DeadlineExceeded),
		// A runner's interruption, whose reason carries a keep-alive's
		// own deadline in its text: never the caller's deadline.
		"interrupted": fmt.Errorf("%w by its runner: detached: keep-alive: context deadline exceeded", entity.ErrInterrupted),
		"app":         entity.Permanent(app),
		"unknownop":   entity.Permanent(&entity.UnknownOpError{Type: "echo", Op: "Reset", Ops: []string{"Add", "Get"}}),
	}
	d := func(_ context.Context, d entity.Delivery) ([]byte, error) {
		if d.ID == "huge" {
			return bytes.Repeat([]byte("x"), testConfig().MaxMessageBytes+1), nil
		}
		return nil, errs[d.ID]
	}
	no, unknown, yes := messaging.AppliedNo, messaging.AppliedUnknown, messaging.AppliedYes
	cases := []struct {
		id      string
		code    messaging.Code
		is      []error
		isNot   []error
		msg     string
		applied messaging.Applied
	}{
		{"unknown", messaging.Code(1), []error{messaging.ErrUnknownType}, nil, `type "echo"`, no},
		{"badinput", messaging.Code(2), []error{messaging.ErrBadInput, entity.ErrBadInput}, nil, "decoding", no},
		{"panic", messaging.Code(3), []error{messaging.ErrPanicked}, nil, "boom", unknown},
		{"handler", messaging.Code(4), []error{messaging.ErrHandler}, nil, "handler says no", unknown},
		{"owntimeout", messaging.Code(4), []error{messaging.ErrHandler}, []error{context.DeadlineExceeded}, "fetching", unknown},
		{"interrupted", messaging.Code(8), []error{entity.ErrInterrupted}, []error{context.DeadlineExceeded, context.Canceled}, "detached", unknown},
		{"app", messaging.Code(9), nil, []error{messaging.ErrHandler}, "checked out", yes},
		{"huge", messaging.Code(7), []error{messaging.ErrTooLarge}, nil, "reply of", yes},
		{"unknownop", messaging.Code(11), []error{messaging.ErrUnknownOp, entity.ErrUnknownOp, messaging.ErrBadInput, entity.ErrBadInput},
			[]error{messaging.ErrUnknownType}, `no operation "Reset" (have Add, Get)`, no},
	}
	for _, local := range []bool{false, true} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/local=%v", tc.id, local), func(t *testing.T) {
				f := &fake{fn: d}
				c := clientOf(t, f, local)
				_, err := c.Call(ctxT(t), "echo", tc.id, nil)
				var ce *messaging.CallError
				if !errors.As(err, &ce) || ce.Code != tc.code || ce.Type != "echo" || ce.ID != tc.id || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("Call: %v; want a CallError %s naming %q", err, tc.code, tc.msg)
				}
				for _, target := range tc.is {
					if !errors.Is(err, target) {
						t.Errorf("%v does not match %v", err, target)
					}
				}
				for _, target := range tc.isNot {
					if errors.Is(err, target) {
						t.Errorf("%v matches %v", err, target)
					}
				}
				if got := messaging.AppliedOf(err); got != tc.applied || ce.Applied() != tc.applied {
					t.Errorf("AppliedOf(%v) = %s (CallError says %s), want %s", err, got, ce.Applied(), tc.applied)
				}
				if messaging.Retryable(err) {
					t.Errorf("Retryable(%v) = true", err)
				}
				if n := f.count.Load(); n != 1 {
					t.Errorf("%d deliveries, want 1", n)
				}
				if tc.id != "app" {
					return
				}
				var ae *entity.AppError
				if !errors.As(err, &ae) || ae.Code != "checked_out" || ae.Message != "cart c1 is checked out" ||
					string(ae.Details) != `{"cart":"c1"}` || ae.HTTPStatus() != 409 {
					t.Errorf("errors.As AppError: %+v; want the handler's code, message, details and status", ae)
				}
			})
		}
	}
}

// TestCallerDeadlineBeforeAndAfterStart: the caller's deadline passing is
// reported as the caller's deadline, and (on the local path, where the
// caller hears the host's verdict) as not applied when the handler had not
// started (it waited for its turn) or unknown when it had; a call
// whose entity could not be activated is retried until the deadline, then
// reported not applied, except for a corrupt durable state, which every
// attempt would meet: that is answered at once, not applied, not retried.
func TestCallerDeadlineBeforeAndAfterStart(t *testing.T) {
	testenv.CheckLeaks(t)
	d := func(ctx context.Context, d entity.Delivery) ([]byte, error) {
		switch d.ID {
		case "inactive":
			return nil, fmt.Errorf("%w: activating the entity: state did not load", entity.ErrNotStarted)
		case "corrupt":
			return nil, fmt.Errorf("%w: activating the entity: %w", entity.ErrNotStarted, entity.ErrStateCorrupt)
		}
		<-ctx.Done()
		if d.ID == "waiting" {
			return nil, fmt.Errorf("%w: %w", entity.ErrNotStarted, context.Cause(ctx))
		}
		return nil, fmt.Errorf("%w: %w (the handler returned: %v)", entity.ErrInterrupted, context.Cause(ctx), ctx.Err())
	}
	cases := []struct {
		id        string
		code      messaging.Code
		is        []error
		applied   messaging.Applied
		retryable bool
		multi     bool // delivered more than once
	}{
		{"waiting", messaging.Code(5), []error{context.DeadlineExceeded, entity.ErrNotStarted}, messaging.AppliedNo, true, false},
		{"running", messaging.Code(5), []error{context.DeadlineExceeded, entity.ErrInterrupted}, messaging.AppliedUnknown, false, false},
		{"inactive", messaging.Code(10), []error{entity.ErrNotStarted}, messaging.AppliedNo, true, true},
		{"corrupt", messaging.Code(13), []error{entity.ErrStateCorrupt, entity.ErrNotStarted}, messaging.AppliedNo, false, false},
	}
	for _, local := range []bool{false, true} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/local=%v", tc.id, local), func(t *testing.T) {
				f := &fake{fn: d}
				c := clientOf(t, f, local)
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				_, err := c.Call(ctx, "echo", tc.id, nil)
				var ce *messaging.CallError
				if !local && tc.id != "inactive" && tc.id != "corrupt" {
					// Remote: the caller's own deadline ends its wait for
					// the reply first (the owner's deadline is the same or
					// later), so it cannot know whether the handler
					// started: the outcome is unknown.
					if !errors.Is(err, context.DeadlineExceeded) || messaging.AppliedOf(err) != messaging.AppliedUnknown || messaging.Retryable(err) {
						t.Fatalf("Call: %v (applied %s); want the deadline, applied unknown", err, messaging.AppliedOf(err))
					}
					return
				}
				if !errors.As(err, &ce) || ce.Code != tc.code {
					t.Fatalf("Call: %v; want a CallError %s", err, tc.code)
				}
				for _, target := range tc.is {
					if !errors.Is(err, target) {
						t.Errorf("%v does not match %v", err, target)
					}
				}
				if got := messaging.AppliedOf(err); got != tc.applied {
					t.Errorf("AppliedOf(%v) = %s, want %s", err, got, tc.applied)
				}
				if got := messaging.Retryable(err); got != tc.retryable {
					t.Errorf("Retryable(%v) = %v, want %v", err, got, tc.retryable)
				}
				if n := f.count.Load(); (n > 1) != tc.multi {
					t.Errorf("%d deliveries; want more than one: %v", n, tc.multi)
				}
			})
		}
	}
}

func TestBadNames(t *testing.T) {
	v := newView()
	c, _ := v.client(t)
	for _, tc := range []struct{ typ, id, want string }{{"", "e1", "type is empty"}, {"echo", "", "id is empty"}} {
		_, err := c.Call(ctxT(t), tc.typ, tc.id, nil)
		if !errors.Is(err, messaging.ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Call(%q, %q): %v; want bad input naming %q", tc.typ, tc.id, err, tc.want)
		}
	}
	_, err := c.Invoke(ctxT(t), &entity.Message{Type: "echo", ID: "e1", Op: "9lives"})
	if !errors.Is(err, messaging.ErrBadInput) || !strings.Contains(err.Error(), `op "9lives"`) {
		t.Errorf("Invoke op 9lives: %v; want bad input naming the op", err)
	}
}
