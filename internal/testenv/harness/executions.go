package harness

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Execution is one run of a task's handler, as the handler saw it.
type Execution struct {
	Runner, TaskID, Entity string
	// Shard and Epoch are the claim the run was made under, when the
	// handler is told it (the integration tests' http: handler is).
	Shard   storage.ShardID
	Epoch   int64
	Attempt int
	// Start and End are when the handler began and ended the run; End is
	// zero while it runs.
	Start, End time.Time
	// CancelledAt is when the run's context ended, if before End.
	CancelledAt time.Time
	// Err is what the run returned.
	Err error
	// Ctx is the run's context, if the recorder is to watch it (see
	// Begin): whether it has ended can be read at once, before
	// CancelledAt is stamped.
	Ctx context.Context
}

// Cancelled reports whether the run saw its context end before its work
// ended.
func (x Execution) Cancelled() bool { return !x.CancelledAt.IsZero() }

// Done reports whether the run ended with its work done.
func (x Execution) Done() bool { return !x.End.IsZero() && x.Err == nil }

// Recorder logs every handler run of a cluster with one clock. Handlers
// call Begin, then Finish (and Cancelled when they see their context end);
// checks read All.
type Recorder struct {
	mu     sync.Mutex
	runs   []*Execution
	starts atomic.Int64
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Begin records the start of x, now, and returns the handle to pass to
// Cancelled and Finish. If x.Ctx is set, Begin watches it: CancelledAt is
// stamped when it ends before x finishes. Read executions through All,
// not through the handle.
func (r *Recorder) Begin(x Execution) *Execution {
	x.Start = time.Now()
	p := &x
	r.mu.Lock()
	r.runs = append(r.runs, p)
	r.mu.Unlock()
	r.starts.Add(1)
	if x.Ctx != nil {
		context.AfterFunc(x.Ctx, func() {
			r.mu.Lock()
			if p.End.IsZero() {
				p.CancelledAt = time.Now()
			}
			r.mu.Unlock()
		})
	}
	return p
}

// Cancelled notes that the run saw its context end (a Watch's stamp may
// not have been made yet).
func (r *Recorder) Cancelled(x *Execution) {
	r.mu.Lock()
	if x.CancelledAt.IsZero() {
		x.CancelledAt = time.Now()
	}
	r.mu.Unlock()
}

// Finish records the end of x, now, with what it returned.
func (r *Recorder) Finish(x *Execution, err error) {
	r.mu.Lock()
	x.End, x.Err = time.Now(), err
	r.mu.Unlock()
}

// Starts counts the runs begun.
func (r *Recorder) Starts() int64 { return r.starts.Load() }

// All returns every run so far, in order of start.
func (r *Recorder) All() []Execution {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Execution, len(r.runs))
	for i, x := range r.runs {
		out[i] = *x
	}
	return out
}

// ErrRunning is the Err of a run still under way, in AllEndingNow.
var ErrRunning = errors.New("harness: still running")

// AllEndingNow is All with every run still under way ended now, with Err
// ErrRunning (so not Done): for checks over whole spans, taken while runs
// may still go on.
func (r *Recorder) AllEndingNow() []Execution {
	out := r.All()
	now := time.Now()
	for i := range out {
		if out[i].End.IsZero() {
			out[i].End, out[i].Err = now, ErrRunning
		}
	}
	return out
}

// FinishedTasks counts the tasks with at least one run that ended without
// an error.
func (r *Recorder) FinishedTasks() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := make(map[string]bool, len(r.runs))
	for _, x := range r.runs {
		if x.Done() {
			done[x.TaskID] = true
		}
	}
	return len(done)
}
