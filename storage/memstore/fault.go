package memstore

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Operation names, as passed to hooks and faults and reported in
// storage.OpError.Op. They match storage/s3's.
const (
	OpCreate     = "create"
	OpReplace    = "replace"
	OpPut        = "put"
	OpGet        = "get"
	OpHead       = "head"
	OpDelete     = "delete"
	OpList       = "list"
	OpServerTime = "servertime"
)

var knownOps = map[string]bool{
	OpCreate: true, OpReplace: true, OpPut: true, OpGet: true,
	OpHead: true, OpDelete: true, OpList: true, OpServerTime: true,
}

// When is the point of an operation a fault or hook acts at.
type When int

const (
	// BeforeApply acts before the operation touches the store: an error
	// here means the operation did not happen.
	BeforeApply When = iota
	// AfterApply acts once the operation has happened (whatever its
	// outcome): an error here replaces the outcome, like a response lost on
	// the way back.
	AfterApply
)

// String returns "before-apply" or "after-apply".
func (w When) String() string {
	switch w {
	case BeforeApply:
		return "before-apply"
	case AfterApply:
		return "after-apply"
	}
	return fmt.Sprintf("When(%d)", int(w))
}

// Call identifies the point a Hook is called at.
type Call struct {
	Op   string // one of the Op constants
	Key  string // the key; for List, the prefix; for ServerTime, ""
	When When
}

// Hook is called twice around every operation, at BeforeApply and at
// AfterApply, with the call's context (bounded by the request timeout). A
// non-nil error is returned to the caller in a *storage.OpError: at
// BeforeApply the operation is then skipped. A hook may block, to delay the
// call or to hold it at a point while the test does something else; it
// should honour ctx. Hooks run without the store's lock held, so they may
// call the store.
type Hook func(ctx context.Context, c Call) error

// Fault describes an injected failure or delay. The zero value of every
// field but Err and Delay means "any" or "the default".
type Fault struct {
	Op     string // operation to affect (an Op constant); "" for every one
	Key    string // exact key to affect (List: the prefix); "" for every key
	Prefix string // affect only keys with this prefix; "" for every key
	When   When   // BeforeApply (default) or AfterApply
	// Err is returned, wrapped in a *storage.OpError. Nil with a Delay just
	// slows the call down.
	Err error
	// Delay is waited before the operation (BeforeApply) or before its
	// result is returned (AfterApply). A context that ends during the wait
	// fails the call with the context's error.
	Delay time.Duration
	// Times is how many matching calls the fault affects before it is
	// spent; 0 means until removed.
	Times int
}

func (f Fault) matches(op, key string, when When) bool {
	return f.When == when && (f.Op == "" || f.Op == op) &&
		(f.Key == "" || f.Key == key) && strings.HasPrefix(key, f.Prefix)
}

// Injection is an installed Fault.
type Injection struct {
	s     *Store
	fault Fault
	hits  int // guarded by s.mu
}

// Hits returns how many calls the fault has affected.
func (in *Injection) Hits() int {
	in.s.mu.Lock()
	defer in.s.mu.Unlock()
	return in.hits
}

// Remove uninstalls the fault. Calls already waiting on its delay finish
// waiting.
func (in *Injection) Remove() {
	in.s.mu.Lock()
	defer in.s.mu.Unlock()
	for i, x := range in.s.faults {
		if x == in {
			in.s.faults = append(in.s.faults[:i:i], in.s.faults[i+1:]...)
			return
		}
	}
}

// Inject installs f and returns a handle to count its hits or remove it.
// Faults act in the order they were injected; a call stops at the first
// one that returns an error. Inject panics on an unknown Op or When, or a
// negative Times or Delay: those are mistakes in the test.
func (s *Store) Inject(f Fault) *Injection {
	if f.Op != "" && !knownOps[f.Op] {
		panic(fmt.Sprintf("memstore: Inject: unknown Op %q", f.Op))
	}
	if f.When != BeforeApply && f.When != AfterApply {
		panic(fmt.Sprintf("memstore: Inject: unknown When %d", int(f.When)))
	}
	if f.Times < 0 || f.Delay < 0 {
		panic(fmt.Sprintf("memstore: Inject: negative Times (%d) or Delay (%s)", f.Times, f.Delay))
	}
	in := &Injection{s: s, fault: f}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, in)
	return in
}

// ClearFaults removes every injected fault.
func (s *Store) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// SetHook replaces the store's hook; nil removes it.
func (s *Store) SetHook(h Hook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = h
}

// intercept runs the faults and the hook for one point of a call.
func (s *Store) intercept(ctx context.Context, op, key string, when When) error {
	s.mu.Lock()
	var hit []Fault
	for i := 0; i < len(s.faults); i++ {
		in := s.faults[i]
		if !in.fault.matches(op, key, when) {
			continue
		}
		in.hits++
		hit = append(hit, in.fault)
		if in.fault.Times > 0 && in.hits >= in.fault.Times {
			s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			i--
		}
		if in.fault.Err != nil {
			break
		}
	}
	hook := s.hook
	s.mu.Unlock()

	for _, f := range hit {
		if f.Delay > 0 {
			if err := wait(ctx, f.Delay); err != nil {
				return err
			}
		}
		if f.Err != nil {
			return f.Err
		}
	}
	if hook != nil {
		return hook(ctx, Call{Op: op, Key: key, When: when})
	}
	return nil
}

func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx.Err())
	}
}
