package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
)

// gauge is a defined type whose Peek is read-only and Bump writes. Its
// operations report to a gaugeProbe who is inside the handler, so the
// test sees overlaps from the handler's side.
type gauge struct {
	N     int `json:"n"`
	probe *gaugeProbe
}

// gaugeProbe counts the readers and writers inside a gauge's operations.
// A reader blocks until release is closed (or its context ends).
type gaugeProbe struct {
	mu         sync.Mutex
	readers    int
	writers    int
	maxReaders int
	overlaps   []string // a writer beside anyone, or a reader beside a writer
	release    chan struct{}
	starts     int
	stops      []StopReason
	// stoppedInUse counts the OnStop calls that came while a reader was
	// inside an operation of the instance.
	stoppedInUse int
}

// OnStart counts activations.
func (g *gauge) OnStart(context.Context) error {
	g.probe.mu.Lock()
	defer g.probe.mu.Unlock()
	g.probe.starts++
	return nil
}

// OnStop records why the instance stopped, and whether a reader was
// still inside it.
func (g *gauge) OnStop(_ context.Context, reason StopReason) {
	g.probe.mu.Lock()
	defer g.probe.mu.Unlock()
	g.probe.stops = append(g.probe.stops, reason)
	if g.probe.readers > 0 {
		g.probe.stoppedInUse++
	}
}

// Boom is read-only and panics.
func (g *gauge) Boom(_ Context) error { panic("boom") }

func (p *gaugeProbe) enterRead() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readers++
	p.maxReaders = max(p.maxReaders, p.readers)
	if p.writers > 0 {
		p.overlaps = append(p.overlaps, fmt.Sprintf("a reader entered beside %d writers", p.writers))
	}
}

func (p *gaugeProbe) leaveRead() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readers--
}

func (p *gaugeProbe) enterWrite() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writers++
	if p.readers > 0 || p.writers > 1 {
		p.overlaps = append(p.overlaps, fmt.Sprintf("a writer entered beside %d readers and %d writers", p.readers, p.writers-1))
	}
}

func (p *gaugeProbe) leaveWrite() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writers--
}

func (p *gaugeProbe) inside() (readers, writers int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.readers, p.writers
}

// Peek blocks until released, then answers N.
func (g *gauge) Peek(ctx Context) (int, error) {
	g.probe.enterRead()
	defer g.probe.leaveRead()
	select {
	case <-g.probe.release:
		return g.N, nil
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

// Bump adds one to N.
func (g *gauge) Bump(_ Context) (int, error) {
	g.probe.enterWrite()
	defer g.probe.leaveWrite()
	g.N++
	return g.N, nil
}

// pendingTasks reports how many tasks of (typ, id) are in its mailbox,
// waiting for their turn.
func (b *bareHost) pendingTasks(typ, id string) int {
	n, _ := b.mailbox(typ, id)
	return n
}

// TestReadOnlyCallsShareTheTurn: two read-only calls of one entity run
// at once (both inside the handler, seen by the handler), a writing call
// and a writing task wait for both, and a read-only call arriving behind a
// waiting writer waits for it rather than joining the readers. No writer
// ever overlaps a reader or another writer.
func TestReadOnlyCallsShareTheTurn(t *testing.T) {
	e := newEnv(t, 1)
	probe := &gaugeProbe{release: make(chan struct{})}
	d := Define("gauge", func(string) *gauge { return &gauge{probe: probe} }, ReadOnly("Peek", "Boom"))
	if !d.IsReadOnly("Peek") || !d.IsReadOnly("peek") || d.IsReadOnly("Bump") {
		t.Fatal("IsReadOnly does not tell Peek (read-only) from Bump")
	}
	b := e.bareHost(func(h *Host) {
		if err := h.Define(d); err != nil {
			t.Fatal(err)
		}
	})
	b.own(shard0, 100)
	ctx := ctxFor(t, 30*time.Second)
	invokeAsync := func(op string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			r, err := b.invoke(ctx, "gauge", "g1", op, ``)
			ch <- result{r, err}
		}()
		return ch
	}
	inside := func(r, w int) func() bool {
		return func() bool { gr, gw := probe.inside(); return gr == r && gw == w }
	}

	r1 := invokeAsync("Peek")
	testenv.WaitFor(t, "the first reader inside", 10*time.Second, inside(1, 0))
	r2 := invokeAsync("peek")
	testenv.WaitFor(t, "both readers inside at once", 10*time.Second, inside(2, 0))

	// A writing call waits for the readers; a reader behind it waits too.
	w1 := invokeAsync("Bump")
	testenv.WaitFor(t, "the writing call waiting for its turn", 10*time.Second, func() bool { return b.waiting("gauge", "g1") == 1 })
	r3 := invokeAsync("Peek")
	testenv.WaitFor(t, "the third reader waiting behind the writer", 10*time.Second, func() bool { return b.waiting("gauge", "g1") == 2 })
	// A writing task of the entity waits for its turn too.
	tk := e.submit(task.SubmitRequest{Type: "gauge", Entity: "g1", Op: "Bump"})
	testenv.WaitFor(t, "the writing task waiting in the mailbox", 20*time.Second, func() bool { return b.pendingTasks("gauge", "g1") == 1 })
	if gr, gw := probe.inside(); gr != 2 || gw != 0 {
		t.Fatalf("inside the handler before the readers are released: %d readers, %d writers; want 2 readers", gr, gw)
	}

	close(probe.release)
	for i, ch := range []<-chan result{r1, r2, w1, r3} {
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("call %d: %v", i, r.err)
			}
		case <-ctx.Done():
			t.Fatalf("call %d never returned", i)
		}
	}
	done := e.final(tk.Ref(), 30*time.Second)
	if done.Status != task.Completed {
		t.Fatalf("task: %s %s", done.Status, done.Error)
	}
	var n int
	if err := json.Unmarshal(done.Result, &n); err != nil || n < 1 || n > 2 {
		t.Fatalf("task result %s (%v), want 1 or 2", done.Result, err)
	}
	mustInvoke(t, b, "gauge", "g1", "Bump", ``, `3`)
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if probe.maxReaders < 2 {
		t.Fatalf("at most %d readers were inside at once, want 2", probe.maxReaders)
	}
	if len(probe.overlaps) > 0 {
		t.Fatalf("a writer overlapped: %v", probe.overlaps)
	}
}

// TestReadOnlyPanicDiscardsAfterLastReader: a read-only call that panics
// beside another reader fails with a *PanicError, and its instance is
// discarded (StopFailed) only once the other reader has left, never under
// it; the next call activates a fresh instance.
func TestReadOnlyPanicDiscardsAfterLastReader(t *testing.T) {
	e := newEnv(t, 1)
	probe := &gaugeProbe{release: make(chan struct{})}
	b := e.bareHost(func(h *Host) {
		if err := h.Define(Define("gauge", func(string) *gauge { return &gauge{probe: probe} }, ReadOnly("Peek", "Boom"))); err != nil {
			t.Fatal(err)
		}
	})
	b.own(shard0, 100)
	ctx := ctxFor(t, 30*time.Second)
	peek := make(chan result, 1)
	go func() {
		r, err := b.invoke(ctx, "gauge", "g1", "Peek", ``)
		peek <- result{r, err}
	}()
	testenv.WaitFor(t, "the reader inside", 10*time.Second, func() bool { r, _ := probe.inside(); return r == 1 })
	_, err := b.invoke(ctx, "gauge", "g1", "Boom", ``)
	var pe *PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("Boom: %v, want a *PanicError", err)
	}
	probe.mu.Lock()
	stops := len(probe.stops)
	probe.mu.Unlock()
	if stops != 0 {
		t.Fatalf("the instance stopped %d times while a reader was still inside", stops)
	}
	close(probe.release)
	if r := <-peek; r.err != nil || r.reply != `0` {
		t.Fatalf("Peek: %q, %v", r.reply, r.err)
	}
	testenv.WaitFor(t, "the broken instance discarded", 10*time.Second, func() bool {
		probe.mu.Lock()
		defer probe.mu.Unlock()
		return len(probe.stops) == 1
	})
	mustInvoke(t, b, "gauge", "g1", "Peek", ``, `0`)
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if probe.stops[0] != StopFailed || probe.stoppedInUse != 0 || probe.starts != 2 {
		t.Fatalf("stops %v (%d while in use), starts %d; want one failed stop, none in use, 2 starts", probe.stops, probe.stoppedInUse, probe.starts)
	}
}
