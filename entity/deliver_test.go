package entity

// This file is past the ~500-line mark on purpose: it is the delivery
// path's tests (replies, turns, refusals, handoff, lock loss, bad input,
// detachment) around one bare host (bareHost, the probe), which they share
// and which no other file uses; split, each part would carry a copy of
// the fixture or reach into another file for it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/storage"
)

// bareHost is a host on the env's etcd and S3 whose ownerships the test
// makes and ends itself (no manager), to drive every way one ends.
type bareHost struct {
	*Host
	e   *env
	reg *prometheus.Registry
}

func (e *env) bareHost(register func(h *Host), opts ...Option) *bareHost {
	e.t.Helper()
	rs, err := e.Store(context.Background(), "")
	if err != nil {
		e.t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts = append([]Option{WithRegistry(reg), WithLogger(e.logs.logger("bare"))}, opts...)
	h, err := NewHost(e.runnerTaskStore("bare"), rs, "bare", e.ecfg, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	register(h)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			e.t.Error(err)
		}
	})
	return &bareHost{Host: h, e: e, reg: reg}
}

// testOwnership is an ownership the test ends: end cancels its context
// with a *sharding.LostError, detach ends its detachment decision.
type testOwnership struct {
	sharding.Ownership
	cancel context.CancelCauseFunc
	detach context.CancelCauseFunc
}

func (o *testOwnership) end(reason sharding.LossReason) {
	o.cancel(&sharding.LostError{Shard: o.Shard, Epoch: o.Epoch, Reason: reason})
}

// own hands the host shard under epoch, with a detachment decision.
func (b *bareHost) own(shard storage.ShardID, epoch int64) *testOwnership {
	ctx, cancel := context.WithCancelCause(context.Background())
	dctx, dcancel := context.WithCancelCause(context.Background())
	o := &testOwnership{cancel: cancel, detach: dcancel}
	o.Ownership = sharding.Ownership{Shard: shard, Epoch: epoch, LeaseID: 1, Since: time.Now(), Ctx: ctx,
		Enforcement: func() detachment.Enforcement { return detachment.Enforcement{Ctx: dctx} }}
	b.ShardAcquired(o.Ownership)
	b.e.t.Cleanup(func() {
		dcancel(nil)
		if ctx.Err() == nil {
			o.end(sharding.LossStopped)
			b.ShardLost(o.Ownership, sharding.LossStopped)
		}
	})
	return o
}

// ownAll hands the host every shard of the env, under epoch 100+index.
func (b *bareHost) ownAll() map[storage.ShardID]*testOwnership {
	out := map[storage.ShardID]*testOwnership{}
	for i := range b.e.Meta.Shards {
		s := storage.ShardID{Group: storage.DefaultGroup, Index: i}
		out[s] = b.own(s, int64(100+i))
	}
	return out
}

// delivery addresses (typ, id) on its shard of the env, any epoch.
func (b *bareHost) delivery(typ, id string, body string) Delivery {
	return Delivery{Message: Message{Type: typ, ID: id, Body: []byte(body)},
		Shard: task.ShardOf(storage.DefaultGroup, b.e.Meta.Shards, typ, id, "")}
}

func (b *bareHost) call(ctx context.Context, typ, id, body string) (string, error) {
	reply, err := b.Deliver(ctx, b.delivery(typ, id, body))
	return string(reply), err
}

// probe is a test entity taking calls (Receiver) and tasks: it fails the
// test's overlap count if two turns of one entity ever run at once, keeps
// the bodies it received in order, and runs the test's hook if set.
type probe struct {
	id   string
	s    *probeStats
	seen []string
}

type probeStats struct {
	turns    sync.Map // id → *atomic.Int32: turns running now
	overlaps atomic.Int32
	starts   atomic.Int32
	runs     atomic.Int32
	hook     func(ctx context.Context, m *Message) ([]byte, error)
}

func (p *probe) enter() func() {
	v, _ := p.s.turns.LoadOrStore(p.id, new(atomic.Int32))
	n := v.(*atomic.Int32)
	if n.Add(1) > 1 {
		p.s.overlaps.Add(1)
	}
	p.s.runs.Add(1)
	return func() { n.Add(-1) }
}

func (p *probe) OnStart(context.Context) error { p.s.starts.Add(1); return nil }

func (p *probe) Receive(ctx context.Context, m *Message) ([]byte, error) {
	defer p.enter()()
	p.seen = append(p.seen, string(m.Body))
	if p.s.hook != nil {
		return p.s.hook(ctx, m)
	}
	if string(m.Body) == `"seen"` {
		return json.Marshal(p.seen)
	}
	return m.Body, nil
}

func (p *probe) Handle(context.Context, *task.Task) (json.RawMessage, error) {
	defer p.enter()()
	return json.RawMessage(`"task"`), nil
}

func registerProbe(t testing.TB, s *probeStats) func(h *Host) {
	return func(h *Host) {
		if err := h.Register("probe", func(id string) (Entity, error) { return &probe{id: id, s: s}, nil }); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeCaller answers every call with "fake".
type fakeCaller struct{}

func (fakeCaller) Call(context.Context, string, string, []byte) ([]byte, error) {
	return []byte(`"fake"`), nil
}
func (fakeCaller) Send(context.Context, string, string, []byte) error { return nil }
func (fakeCaller) Invoke(context.Context, *Message) ([]byte, error)   { return nil, nil }

type sumIn struct{ A, B int }
type sumOut struct {
	Sum    int    `json:"sum"`
	Call   bool   `json:"call"`   // CallFrom found a message
	Caller string `json:"caller"` // what CallerFrom's Call answered
	Task   string `json:"task"`
}

// TestDeliverReplies: a call is answered through Receive and, for an
// entity without it, through Handle given a task built from the message; a
// handler of a call and of a task finds the host's Caller, and only a
// call's finds its message.
func TestDeliverReplies(t *testing.T) {
	e := newEnv(t, 2)
	s := &probeStats{}
	b := e.bareHost(func(h *Host) {
		registerProbe(t, s)(h)
		if err := h.RegisterFunc("sum", TaskFunc(func(ctx context.Context, tk *task.Task, in sumIn) (sumOut, error) {
			_, call := CallFrom(ctx)
			got, err := CallerFrom(ctx).Call(ctx, "x", "y", nil)
			return sumOut{Sum: in.A + in.B, Call: call, Caller: string(got), Task: tk.ID}, err
		})); err != nil {
			t.Fatal(err)
		}
	}, WithCaller(fakeCaller{}))
	b.ownAll()
	ctx := ctxFor(t, 30*time.Second)

	if got, err := b.call(ctx, "probe", "p1", `{"hello":1}`); err != nil || got != `{"hello":1}` {
		t.Fatalf("probe call: %q, %v", got, err)
	}
	got, err := b.call(ctx, "sum", "s1", `{"A":2,"B":3}`)
	if err != nil {
		t.Fatal(err)
	}
	var out sumOut
	if err := json.Unmarshal([]byte(got), &out); err != nil {
		t.Fatal(err)
	}
	if out.Sum != 5 || !out.Call || out.Caller != `"fake"` || !strings.HasPrefix(out.Task, "call-") {
		t.Fatalf("sum call replied %+v", out)
	}
	tk := e.submit(task.SubmitRequest{Type: "sum", Entity: "s1", Input: json.RawMessage(`{"A":1,"B":1}`)})
	done := e.final(tk.Ref(), 30*time.Second)
	if done.Status != task.Completed {
		t.Fatalf("task ended %s: %s", done.Status, done.Error)
	}
	out = sumOut{}
	if err := json.Unmarshal(done.Result, &out); err != nil {
		t.Fatal(err)
	}
	if out.Sum != 2 || out.Call || out.Caller != `"fake"` {
		t.Fatalf("sum task result %+v", out)
	}
	if n := float64(b.metrics.messages(kindCall, msgOK).Value()); n != 2 {
		t.Fatalf("calls counted ok: %v, want 2", n)
	}
}

// TestDeliverTurns: calls and tasks of one entity, many at once, never
// overlap, and all complete; one caller's sends, then its call, run in
// the order sent.
func TestDeliverTurns(t *testing.T) {
	e := newEnv(t, 2)
	s := &probeStats{}
	b := e.bareHost(registerProbe(t, s))
	b.ownAll()
	ctx := ctxFor(t, 60*time.Second)

	const callers, perCaller, tasks = 8, 40, 20
	var refs []string
	for range tasks {
		refs = append(refs, e.submit(task.SubmitRequest{Type: "probe", Entity: "busy"}).Ref())
	}
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			for i := range perCaller {
				body := fmt.Sprintf(`"%d-%d"`, c, i)
				if got, err := b.call(ctx, "probe", "busy", body); err != nil || got != body {
					errs <- fmt.Errorf("call %s: %q, %v", body, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if got := e.final(ref, 30*time.Second); got.Status != task.Completed {
			t.Fatalf("%s ended %s: %s", ref, got.Status, got.Error)
		}
	}
	if n := s.overlaps.Load(); n != 0 {
		t.Fatalf("%d turns of one entity overlapped", n)
	}
	if n := s.runs.Load(); n != callers*perCaller+tasks {
		t.Fatalf("%d turns ran, want %d", n, callers*perCaller+tasks)
	}

	var want []string
	for i := range 50 {
		body := fmt.Sprintf(`"s%d"`, i)
		want = append(want, body)
		d := b.delivery("probe", "order", body)
		d.OneWay = true
		if _, err := b.Deliver(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.call(ctx, "probe", "order", `"seen"`)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, `"seen"`)
	if wantJSON, _ := json.Marshal(want); got != string(wantJSON) {
		t.Fatalf("entity saw %s, want %s", got, wantJSON)
	}
}

// blocker is a probe hook: the calls whose body is "block" signal entered
// and run until released or cancelled, reporting how they ended.
type blocker struct {
	entered chan struct{}
	release chan struct{}
	ended   chan error // context.Cause when cancelled, nil when released
	// returned is set as a released handler returns: what a planned
	// release waits for (its caller's Deliver returns a moment later).
	returned atomic.Bool
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}, 16), release: make(chan struct{}), ended: make(chan error, 16)}
}

func (k *blocker) hook(ctx context.Context, m *Message) ([]byte, error) {
	if string(m.Body) != `"block"` {
		return m.Body, nil
	}
	k.entered <- struct{}{}
	select {
	case <-k.release:
		k.ended <- nil
		k.returned.Store(true)
		return []byte(`"released"`), nil
	case <-ctx.Done():
		k.ended <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	}
}

// blockingHost is a bare host of probes whose calls with body "block"
// block (see blocker), on an env of 2 shards.
func blockingHost(t *testing.T) (*bareHost, *blocker) {
	e := newEnv(t, 2)
	s := &probeStats{}
	k := newBlocker()
	s.hook = k.hook
	return e.bareHost(registerProbe(t, s)), k
}

// waiting reports how many messages wait for the turn of (typ, id).
func (b *bareHost) waiting(typ, id string) int {
	_, n := b.mailbox(typ, id)
	return n
}

// mailbox reports how many tasks and messages of (typ, id) are in its
// mailbox, waiting for their turn.
func (b *bareHost) mailbox(typ, id string) (tasks, messages int) {
	e := b.route(task.ShardOf(storage.DefaultGroup, b.e.Meta.Shards, typ, id, ""))
	if e == nil {
		return 0, 0
	}
	e.sched.mu.Lock()
	defer e.sched.mu.Unlock()
	if box := e.sched.boxes[task.EntityKey(typ, id)]; box != nil {
		return len(box.pending), len(box.waiting)
	}
	return 0, 0
}

type result struct {
	reply string
	err   error
}

func (b *bareHost) callAsync(ctx context.Context, typ, id, body string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		r, err := b.call(ctx, typ, id, body)
		ch <- result{r, err}
	}()
	return ch
}

func refusedAs(t *testing.T, err error, reason RefusalReason, epoch int64) {
	t.Helper()
	var r *RefusedError
	if !errors.As(err, &r) || !errors.Is(err, ErrRefused) || r.Reason != reason || r.Epoch != epoch {
		t.Fatalf("got %v, want a %s refusal with held epoch %d", err, reason, epoch)
	}
}

// TestDeliverRefusals: a shard not held, another epoch than held and a
// detached decision are refused, and a detachment cancels a running call.
func TestDeliverRefusals(t *testing.T) {
	b, k := blockingHost(t)
	ctx := ctxFor(t, 30*time.Second)

	d := b.delivery("probe", "r1", `1`)
	_, err := b.Deliver(ctx, d)
	refusedAs(t, err, RefusedNotOwner, 0)
	o := b.own(d.Shard, 7)
	d.Epoch = 6
	_, err = b.Deliver(ctx, d)
	refusedAs(t, err, RefusedNotOwner, 7)
	d.Epoch = 7
	if _, err := b.Deliver(ctx, d); err != nil {
		t.Fatal(err)
	}

	running := b.callAsync(ctx, "probe", "r1", `"block"`)
	<-k.entered
	queued := b.callAsync(ctx, "probe", "r1", `2`)
	testenv.WaitFor(t, "a queued call", 10*time.Second, func() bool { return b.waiting("probe", "r1") == 1 })
	// A detachment's reason may wrap the keep-alive's own deadline, as
	// etcd's does: the caller must not read it as its deadline.
	o.detach(fmt.Errorf("test detaches: keep-alive failed: %w", context.DeadlineExceeded))
	if cause := <-k.ended; cause == nil || !strings.Contains(cause.Error(), "test detaches") {
		t.Fatalf("running call ended with %v, want the detachment", cause)
	}
	// The caller sees an interruption by the runner naming the
	// detachment, not the handler's failure, and no context error: its
	// deadline did not pass.
	if r := <-running; r.err == nil || !errors.Is(r.err, ErrInterrupted) || errors.Is(r.err, context.DeadlineExceeded) ||
		errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), "test detaches") {
		t.Fatalf("running call after the detachment returned %v, want an interruption matching ErrInterrupted and no context error", r.err)
	}
	refusedAs(t, (<-queued).err, RefusedNotAttached, 7)
	_, err = b.Deliver(ctx, d)
	refusedAs(t, err, RefusedNotAttached, 7)
	if n := float64(b.metrics.messages(kindCall, msgRefused).Value()); n != 4 {
		t.Fatalf("refusals counted: %v, want 4", n)
	}
}

// TestDeliverHandoff: in a planned release the running call finishes and
// ShardReleasing returns only after it, while the queued and the new calls
// are refused as shard-moving; the releasing runner's route goes once the
// release is over.
func TestDeliverHandoff(t *testing.T) {
	b, k := blockingHost(t)
	ctx := ctxFor(t, 30*time.Second)
	d := b.delivery("probe", "h1", `"block"`)
	o := b.own(d.Shard, 9)

	running := make(chan result, 1)
	go func() {
		r, err := b.Deliver(ctx, d)
		running <- result{string(r), err}
	}()
	<-k.entered
	queued := b.callAsync(ctx, "probe", "h1", `2`)
	testenv.WaitFor(t, "a queued call", 10*time.Second, func() bool { return b.waiting("probe", "h1") == 1 })

	o.end(sharding.LossReleased)
	refusedAs(t, (<-queued).err, RefusedShardMoving, 9)
	_, err := b.call(ctx, "probe", "h1", `3`)
	refusedAs(t, err, RefusedShardMoving, 9)
	other := "other"
	for i := 0; task.ShardOf(storage.DefaultGroup, b.e.Meta.Shards, "probe", other, "") != d.Shard; i++ {
		other = fmt.Sprintf("other-%d", i)
	}
	_, err = b.call(ctx, "probe", other, `3`)
	refusedAs(t, err, RefusedShardMoving, 9)

	released := make(chan bool, 1)
	go func() {
		b.ShardReleasing(ctxFor(t, 20*time.Second), o.Ownership)
		released <- k.returned.Load()
	}()
	close(k.release)
	if cause := <-k.ended; cause != nil {
		t.Fatalf("the running call was cancelled by the release: %v", cause)
	}
	if r := <-running; r.err != nil || r.reply != `"released"` {
		t.Fatalf("running call: %q, %v", r.reply, r.err)
	}
	if !<-released {
		t.Fatal("ShardReleasing returned before the running call's handler had")
	}
	if b.route(d.Shard) != nil {
		t.Fatal("the route stays after the release")
	}
	_, err = b.call(ctx, "probe", "h1", `4`)
	refusedAs(t, err, RefusedNotOwner, 0)
}

// TestDeliverLockLoss: a lost lock cancels the running call with the loss
// and refuses the queued one as not-owner.
func TestDeliverLockLoss(t *testing.T) {
	b, k := blockingHost(t)
	ctx := ctxFor(t, 30*time.Second)
	d := b.delivery("probe", "l1", `"block"`)
	o := b.own(d.Shard, 11)
	running := b.callAsync(ctx, "probe", "l1", `"block"`)
	<-k.entered
	queued := b.callAsync(ctx, "probe", "l1", `2`)
	testenv.WaitFor(t, "a queued call", 10*time.Second, func() bool { return b.waiting("probe", "l1") == 1 })
	o.end(sharding.LossLockLost)
	if cause := <-k.ended; !errors.Is(cause, sharding.ErrShardLost) {
		t.Fatalf("running call ended with %v, want the loss", cause)
	}
	if r := <-running; !errors.Is(r.err, sharding.ErrShardLost) {
		t.Fatalf("running call returned %v", r.err)
	}
	refusedAs(t, (<-queued).err, RefusedNotOwner, 0)
	b.ShardLost(o.Ownership, sharding.LossLockLost)
	_, err := b.call(ctx, "probe", "l1", `3`)
	refusedAs(t, err, RefusedNotOwner, 0)
}

// TestDeliverBadInput: a panic is an error reply and the next call gets a
// fresh instance; an expired deadline does not run the handler; a caller
// cancelling mid-call cancels the handler; an unknown type and a non-JSON
// body for a task handler are errors, without running; a send returns
// before its handler runs, which runs once.
func TestDeliverBadInput(t *testing.T) {
	e := newEnv(t, 2)
	s := &probeStats{}
	k := newBlocker()
	sendGate := make(chan struct{})
	s.hook = func(ctx context.Context, m *Message) ([]byte, error) {
		switch string(m.Body) {
		case `"panic"`:
			panic("probe panics on purpose")
		case `"send"`:
			<-sendGate
		}
		return k.hook(ctx, m)
	}
	var sumRuns atomic.Int32
	b := e.bareHost(func(h *Host) {
		registerProbe(t, s)(h)
		if err := h.RegisterFunc("sum", Func(func(_ context.Context, in sumIn) (int, error) {
			sumRuns.Add(1)
			return in.A + in.B, nil
		})); err != nil {
			t.Fatal(err)
		}
	})
	b.ownAll()
	ctx := ctxFor(t, 30*time.Second)

	_, err := b.call(ctx, "probe", "b1", `"panic"`)
	var p *PanicError
	if !errors.As(err, &p) {
		t.Fatalf("panicking call: %v, want a *PanicError", err)
	}
	if got, err := b.call(ctx, "probe", "b1", `1`); err != nil || got != `1` {
		t.Fatalf("call after the panic: %q, %v", got, err)
	}
	if n := s.starts.Load(); n != 2 {
		t.Fatalf("%d instances started, want 2 (the panicking one discarded)", n)
	}

	runs := s.runs.Load()
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if _, err := b.call(expired, "probe", "b1", `2`); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrNotStarted) {
		t.Fatalf("expired call: %v", err)
	}
	if s.runs.Load() != runs {
		t.Fatal("the handler ran for an expired call")
	}

	cctx, ccancel := context.WithCancelCause(ctx)
	mid := b.callAsync(cctx, "probe", "b1", `"block"`)
	<-k.entered
	gone := errors.New("caller gone")
	ccancel(gone)
	if cause := <-k.ended; !errors.Is(cause, gone) {
		t.Fatalf("handler ended with %v, want the caller's cancellation", cause)
	}
	if r := <-mid; !errors.Is(r.err, gone) {
		t.Fatalf("cancelled call returned %v", r.err)
	}

	if _, err := b.call(ctx, "nosuch", "x", `1`); !errors.Is(err, ErrNoHandler) || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := b.call(ctx, "sum", "x", `not json`); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "sum/x") {
		t.Fatalf("non-JSON body: %v", err)
	}
	if sumRuns.Load() != 0 {
		t.Fatal("the handler ran for a non-JSON body")
	}

	runs = s.runs.Load()
	d := b.delivery("probe", "b2", `"send"`)
	d.OneWay = true
	if reply, err := b.Deliver(ctx, d); err != nil || reply != nil {
		t.Fatalf("send: %q, %v", reply, err)
	}
	close(sendGate) // the handler cannot have returned before
	testenv.WaitFor(t, "the send handled", 10*time.Second, func() bool {
		return float64(b.metrics.messages(kindSend, msgOK).Value()) == 1
	})
	if n := s.runs.Load() - runs; n != 1 {
		t.Fatalf("the send ran %d times", n)
	}
}

// TestDeliverDetached: a runner cut from etcd refuses calls once its
// detachment decision detaches and cancels the running one, in enforce
// mode (the shards are dropped too) and in observe mode (the shards and
// their tasks carry on, messages do not: they have no S3 fence).
func TestDeliverDetached(t *testing.T) {
	for _, mode := range []detachment.Mode{detachment.ModeEnforce, detachment.ModeObserve} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, 2)
			e.scfg.Detachment.Mode = mode
			s := &probeStats{}
			k := newBlocker()
			s.hook = k.hook
			n := e.start("r1", func(_ *node, h *Host) { registerProbe(t, s)(h) })
			e.waitOwned(20 * time.Second)
			ctx := ctxFor(t, 30*time.Second)
			d := Delivery{Message: Message{Type: "probe", ID: "d1", Body: []byte(`"block"`)},
				Shard: task.ShardOf(storage.DefaultGroup, e.Meta.Shards, "probe", "d1", "")}
			var epoch int64
			for _, o := range n.mgr.Owned() {
				if o.Shard == d.Shard {
					epoch = o.Epoch
				}
			}
			d.Epoch = epoch
			running := make(chan error, 1)
			go func() {
				_, err := n.host.Deliver(ctx, d)
				running <- err
			}()
			<-k.entered
			n.proxy.SetMode(testenv.Blackhole)
			var cause error
			select {
			case cause = <-k.ended:
			case <-ctx.Done():
				t.Fatal("the running call was not cancelled")
			}
			var de *detachment.DetachedError
			if !errors.As(cause, &de) && !errors.Is(cause, sharding.ErrShardLost) {
				t.Fatalf("running call ended with %v, want the detachment", cause)
			}
			if err := <-running; err == nil {
				t.Fatal("the running call succeeded")
			}
			d.Body = []byte(`1`)
			_, err := n.host.Deliver(ctx, d)
			var r *RefusedError
			switch {
			case !errors.As(err, &r):
				t.Fatalf("call while detached: %v, want a refusal", err)
			case mode == detachment.ModeObserve:
				refusedAs(t, err, RefusedNotAttached, epoch)
				if len(n.mgr.Owned()) == 0 {
					t.Fatal("observe mode dropped the shards")
				}
			case r.Reason != RefusedNotAttached && r.Reason != RefusedNotOwner:
				t.Fatalf("call while detached: %v", err)
			}
			n.proxy.SetMode(testenv.Pass)
			e.waitOwned(20 * time.Second)
			testenv.WaitFor(t, "calls served again", 20*time.Second, func() bool {
				d.Epoch = 0
				_, err := n.host.Deliver(ctx, d)
				return err == nil
			})
		})
	}
}
