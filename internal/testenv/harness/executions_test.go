package harness

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

// TestRecorderStampsRuns: a run's start, end and result are recorded; a
// watched run whose context ends first is stamped cancelled, one that
// finished first is not; only runs that ended without an error finish
// their task.
func TestRecorderStampsRuns(t *testing.T) {
	r := NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	cut := r.Begin(Execution{Runner: "a", TaskID: "t1", Attempt: 1, Ctx: ctx})
	done := r.Begin(Execution{Runner: "a", TaskID: "t2", Attempt: 1, Ctx: ctx})
	r.Finish(done, nil)
	failed := r.Begin(Execution{Runner: "b", TaskID: "t3", Attempt: 2})
	r.Finish(failed, errors.New("flaky"))
	if xs := r.AllEndingNow(); xs[0].End.IsZero() || xs[0].Done() || !errors.Is(xs[0].Err, ErrRunning) || !xs[1].Done() {
		t.Errorf("AllEndingNow: %+v", xs)
	}
	cancel()
	testenv.WaitFor(t, "the cancellation stamped", 5*time.Second, func() bool { return r.All()[0].Cancelled() })
	r.Finish(cut, context.Canceled)
	all := r.All()
	if len(all) != 3 || r.Starts() != 3 {
		t.Fatalf("%d runs, %d starts; want 3", len(all), r.Starts())
	}
	if x := all[0]; x.Done() || x.Ctx.Err() == nil || x.CancelledAt.After(x.End) {
		t.Errorf("the cut run: %+v", x)
	}
	if x := all[1]; !x.Done() || x.Cancelled() || x.End.Before(x.Start) {
		t.Errorf("the finished run: %+v", x)
	}
	if x := all[2]; x.Done() || x.Err == nil || x.Runner != "b" || x.Attempt != 2 {
		t.Errorf("the failed run: %+v", x)
	}
	if n := r.FinishedTasks(); n != 1 {
		t.Errorf("FinishedTasks = %d, want 1", n)
	}
}
