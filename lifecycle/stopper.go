package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// ErrQuiescing is returned by Go and Enter once the Stopper quiesces: it
// takes no new task.
var ErrQuiescing = errors.New("lifecycle: quiescing: no new task")

// OverrunError reports the tasks still running when a wait for them ended.
type OverrunError struct {
	Stopper string   // the stopper's name
	Running []string // the tasks' names, sorted, one entry per task
	Err     error    // why the wait ended (the wait's context error)
}

// Error names the stopper and its running tasks.
func (e *OverrunError) Error() string {
	return fmt.Sprintf("lifecycle: %s: %d task(s) still running (%s): %v", e.Stopper, len(e.Running), strings.Join(e.Running, ", "), e.Err)
}

// Unwrap returns the wait's context error.
func (e *OverrunError) Unwrap() error { return e.Err }

// Stopper starts named tasks and waits for them. Its states only move
// forward:
//
//	running --Quiesce--> quiescing --(last task returns)--> stopped
//
// Invariants: a task is accepted (Go, Enter) only while running; Done is
// closed only once quiescing and no task is left; Ctx is cancelled by
// Cancel (or its parent), never by Quiesce alone, so that quiescing stops
// new work while the running work finishes on its own terms.
type Stopper struct {
	name   string
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	quiescing bool
	running   map[*task]struct{}
	done      chan struct{}
}

type task struct{ name string }

// New returns a running Stopper named name (for errors and logs), whose
// context derives from parent.
func New(parent context.Context, name string) *Stopper {
	ctx, cancel := context.WithCancelCause(parent)
	return &Stopper{name: name, ctx: ctx, cancel: cancel, running: map[*task]struct{}{}, done: make(chan struct{})}
}

// Ctx is the tasks' context: cancelled by Cancel or by the parent's end.
func (s *Stopper) Ctx() context.Context { return s.ctx }

// Go runs f(Ctx()) on a goroutine of its own as the task name, unless the
// Stopper quiesces (ErrQuiescing).
func (s *Stopper) Go(name string, f func(ctx context.Context)) error {
	end, err := s.Enter(name)
	if err != nil {
		return err
	}
	go func() {
		defer end()
		f(s.ctx)
	}()
	return nil
}

// Enter counts work that runs on the caller's goroutine as the task name
// (a call holding an entity's turn, say) and returns the function that
// ends it, which must be called once; ErrQuiescing once the Stopper
// quiesces.
func (s *Stopper) Enter(name string) (end func(), err error) {
	t := &task{name: name}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.quiescing {
		return nil, fmt.Errorf("%w (%s: %s)", ErrQuiescing, s.name, name)
	}
	s.running[t] = struct{}{}
	var once sync.Once
	return func() { once.Do(func() { s.leave(t) }) }, nil
}

func (s *Stopper) leave(t *task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.running, t)
	s.closeIfDoneLocked()
}

func (s *Stopper) closeIfDoneLocked() {
	if s.quiescing && len(s.running) == 0 {
		select {
		case <-s.done:
		default:
			close(s.done)
		}
	}
}

// Quiesce stops taking tasks; the running ones go on. It is idempotent.
func (s *Stopper) Quiesce() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.quiescing = true
	s.closeIfDoneLocked()
}

// Quiescing reports whether the Stopper has stopped taking tasks.
func (s *Stopper) Quiescing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quiescing
}

// Cancel cancels Ctx with cause: the running tasks are asked to return.
// It does not quiesce.
func (s *Stopper) Cancel(cause error) { s.cancel(cause) }

// Done is closed once the Stopper has quiesced and its last task has
// returned.
func (s *Stopper) Done() <-chan struct{} { return s.done }

// Running returns the names of the running tasks, sorted.
func (s *Stopper) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.running))
	for t := range s.running {
		out = append(out, t.name)
	}
	slices.Sort(out)
	return out
}

// Stop quiesces and waits until every task has returned or ctx ends; then
// it returns an *OverrunError naming the tasks still running. It does not
// cancel them: Cancel first for a stop that interrupts.
func (s *Stopper) Stop(ctx context.Context) error {
	s.Quiesce()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return &OverrunError{Stopper: s.name, Running: s.Running(), Err: ctx.Err()}
	}
}
