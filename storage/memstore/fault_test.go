package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
)

var errBoom = errors.New("boom")

func TestFaultBeforeApplyDoesNotApply(t *testing.T) {
	s := New()
	c := ctx(t)
	in := s.Inject(Fault{Op: OpCreate, Key: "k", Err: errBoom, Times: 1})
	_, err := s.Create(c, "k", []byte("x"))
	var oe *storage.OpError
	if !errors.Is(err, errBoom) || !errors.As(err, &oe) || oe.Op != OpCreate || oe.Key != "k" || oe.Backend != "mem" {
		t.Fatalf("Create with a before-apply fault: %v, want boom in an OpError for create k", err)
	}
	if _, err := s.Head(c, "k"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Head after a before-apply fault: %v, want ErrNotFound", err)
	}
	if in.Hits() != 1 {
		t.Fatalf("Hits = %d, want 1", in.Hits())
	}
	// Spent: the retry goes through.
	if _, err := s.Create(c, "k", []byte("x")); err != nil {
		t.Fatalf("Create after the fault was spent: %v", err)
	}
	if in.Hits() != 1 {
		t.Fatalf("Hits = %d after the fault was spent, want 1", in.Hits())
	}
}

func TestFaultAfterApplyLosesTheResponse(t *testing.T) {
	s := New()
	c := ctx(t)
	e1, _ := s.Put(c, "task", []byte("pending"))
	s.Inject(Fault{Op: OpReplace, Key: "task", When: AfterApply, Err: storage.ErrUnavailable, Times: 1})
	_, err := s.Replace(c, "task", []byte("running"), e1)
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Replace with an after-apply fault: %v, want ErrUnavailable", err)
	}
	// The write happened: the body changed, and retrying with the old ETag
	// now loses, which is why callers re-read after an ambiguous failure.
	o, err := s.Get(c, "task")
	if err != nil || string(o.Body) != "running" {
		t.Fatalf("Get after an after-apply fault: %q, %v; want the new body", o.Body, err)
	}
	if _, err := s.Replace(c, "task", []byte("running"), e1); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("retried Replace with the old ETag: %v, want ErrPrecondition", err)
	}
}

func TestFaultTimesAndRemove(t *testing.T) {
	s := New()
	c := ctx(t)
	s.Inject(Fault{Op: OpGet, Err: errBoom, Times: 3})
	s.Put(c, "k", []byte("x"))
	for i := 0; i < 3; i++ {
		if _, err := s.Get(c, "k"); !errors.Is(err, errBoom) {
			t.Fatalf("Get %d: %v, want boom", i, err)
		}
	}
	if _, err := s.Get(c, "k"); err != nil {
		t.Fatalf("Get after 3 faults: %v", err)
	}

	forever := s.Inject(Fault{Op: OpPut, Err: errBoom})
	for i := 0; i < 5; i++ {
		if _, err := s.Put(c, "k", []byte("y")); !errors.Is(err, errBoom) {
			t.Fatalf("Put %d with an unlimited fault: %v", i, err)
		}
	}
	forever.Remove()
	if _, err := s.Put(c, "k", []byte("y")); err != nil {
		t.Fatalf("Put after Remove: %v", err)
	}
	if forever.Hits() != 5 {
		t.Fatalf("Hits = %d, want 5", forever.Hits())
	}
	s.Inject(Fault{Err: errBoom})
	s.ClearFaults()
	if _, err := s.Get(c, "k"); err != nil {
		t.Fatalf("Get after ClearFaults: %v", err)
	}
}

func TestFaultMatching(t *testing.T) {
	s := New()
	c := ctx(t)
	s.Inject(Fault{Op: OpPut, Key: "a", Err: errBoom})
	s.Inject(Fault{Prefix: "x/", Err: errBoom})
	s.Inject(Fault{Op: OpList, Key: "l/", Err: errBoom})
	cases := []struct {
		name string
		call func() error
		hit  bool
	}{
		{"put a", func() error { _, err := s.Put(c, "a", nil); return err }, true},
		{"put b", func() error { _, err := s.Put(c, "b", nil); return err }, false},
		{"get a", func() error { _, err := s.Get(c, "a"); return err }, false},
		{"put x/1", func() error { _, err := s.Put(c, "x/1", nil); return err }, true},
		{"get x/1", func() error { _, err := s.Get(c, "x/1"); return err }, true},
		{"put y/1", func() error { _, err := s.Put(c, "y/1", nil); return err }, false},
		{"list l/", func() error { _, err := s.List(c, "l/", storage.ListOptions{}); return err }, true},
		{"list l", func() error { _, err := s.List(c, "l", storage.ListOptions{}); return err }, false},
	}
	for _, tc := range cases {
		err := tc.call()
		if hit := errors.Is(err, errBoom); hit != tc.hit {
			t.Fatalf("%s: %v; fault hit = %v, want %v", tc.name, err, hit, tc.hit)
		}
	}
}

func TestFaultTimesUnderConcurrency(t *testing.T) {
	s := New()
	c := ctx(t)
	in := s.Inject(Fault{Op: OpPut, Err: errBoom, Times: 7})
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Put(c, fmt.Sprintf("k%d", i), nil); errors.Is(err, errBoom) {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed != 7 || in.Hits() != 7 || s.Len() != 93 {
		t.Fatalf("%d failures, %d hits, %d objects; want 7, 7, 93", failed, in.Hits(), s.Len())
	}
}

func TestFaultDelay(t *testing.T) {
	s := New()
	s.Inject(Fault{Op: OpGet, Delay: 30 * time.Millisecond, Times: 1})
	s.Put(ctx(t), "k", []byte("x"))
	start := time.Now()
	if _, err := s.Get(ctx(t), "k"); err != nil {
		t.Fatalf("delayed Get: %v", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("delayed Get returned after %s, want ≥ 30ms", d)
	}
}

func TestFaultDelayHonoursContext(t *testing.T) {
	for _, when := range []When{BeforeApply, AfterApply} {
		t.Run(when.String(), func(t *testing.T) {
			s := New()
			s.Inject(Fault{Op: OpCreate, When: when, Delay: time.Hour})
			c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			_, err := s.Create(c, "k", []byte("x"))
			if !errors.Is(err, storage.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Create held past its deadline: %v, want ErrUnavailable and DeadlineExceeded", err)
			}
			_, herr := s.Head(ctx(t), "k")
			applied := herr == nil
			if applied != (when == AfterApply) {
				t.Fatalf("object exists = %v after a %s delay timed out (Head: %v)", applied, when, herr)
			}
		})
	}
}

func TestRequestTimeoutBoundsHooks(t *testing.T) {
	s := New(WithRequestTimeout(20*time.Millisecond), WithHook(func(ctx context.Context, c Call) error {
		<-ctx.Done()
		return ctx.Err()
	}))
	_, err := s.Get(context.Background(), "k")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with a hook that waits for the deadline: %v", err)
	}
}

func TestHookOrchestratesARace(t *testing.T) {
	// Hold a Replace between reading its ETag and applying it, change the
	// object meanwhile, and watch the Replace lose.
	s := New()
	c := ctx(t)
	e1, _ := s.Put(c, "k", []byte("v1"))
	arrived, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var calls []Call
	s.SetHook(func(ctx context.Context, call Call) error {
		mu.Lock()
		calls = append(calls, call)
		mu.Unlock()
		if call.Op == OpReplace && call.When == BeforeApply {
			close(arrived)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := s.Replace(c, "k", []byte("from the slow writer"), e1)
		done <- err
	}()
	<-arrived
	if _, err := s.Put(c, "k", []byte("v2")); err != nil { // hooks run unlocked
		t.Fatalf("Put while a Replace is held: %v", err)
	}
	close(release)
	if err := <-done; !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("held Replace: %v, want ErrPrecondition", err)
	}
	s.SetHook(nil)
	mu.Lock()
	defer mu.Unlock()
	want := []Call{
		{OpReplace, "k", BeforeApply},
		{OpPut, "k", BeforeApply}, {OpPut, "k", AfterApply}, // made while the Replace waits
		{OpReplace, "k", AfterApply},
	}
	if !slices.Equal(calls, want) {
		t.Fatalf("hook calls = %v, want %v", calls, want)
	}
}

func TestHookErrorAfterApply(t *testing.T) {
	s := New(WithHook(func(ctx context.Context, c Call) error {
		if c.Op == OpDelete && c.When == AfterApply {
			return errBoom
		}
		return nil
	}))
	c := ctx(t)
	s.Put(c, "k", nil)
	if err := s.Delete(c, "k"); !errors.Is(err, errBoom) {
		t.Fatalf("Delete: %v, want boom", err)
	}
	if s.Len() != 0 {
		t.Fatal("Delete with an after-apply hook error did not apply")
	}
}

func TestServerTimeFault(t *testing.T) {
	s := New()
	s.Inject(Fault{Op: OpServerTime, Err: storage.ErrUnavailable, Times: 1})
	if _, err := s.ServerTime(ctx(t)); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("ServerTime with a fault: %v", err)
	}
	if _, err := s.ServerTime(ctx(t)); err != nil {
		t.Fatalf("ServerTime after the fault: %v", err)
	}
}

func TestInjectRejectsMistakes(t *testing.T) {
	for _, f := range []Fault{{Op: "replce"}, {When: When(7)}, {Times: -1}, {Delay: -time.Second}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("Inject(%+v) did not panic", f)
				}
			}()
			New().Inject(f)
		}()
	}
}
