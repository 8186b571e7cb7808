package entity

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"

	"github.com/tenurehq/tenure/internal/testenv"
)

// flakyObjects fails a number of Replace and Get calls on keys containing
// a marker, as an S3 outage between a handler's end and its commit would.
type flakyObjects struct {
	storage.ObjectStore
	mu       sync.Mutex
	marker   string
	replaces int // Replace calls still to fail
	gets     int // Get calls still to fail
	puts     int // Put calls (ready pointers) still to fail
	failed   int // calls failed so far
}

func (f *flakyObjects) arm(marker string, replaces, gets int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.marker, f.replaces, f.gets = marker, replaces, gets
}

func (f *flakyObjects) fail(left *int, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.marker == "" || *left == 0 || !strings.Contains(key, f.marker) {
		return nil
	}
	*left--
	f.failed++
	return fmt.Errorf("injected outage on %s: %w", key, storage.ErrUnavailable)
}

func (f *flakyObjects) Replace(ctx context.Context, key string, body []byte, ifMatch string) (string, error) {
	if err := f.fail(&f.replaces, key); err != nil {
		return "", err
	}
	return f.ObjectStore.Replace(ctx, key, body, ifMatch)
}

func (f *flakyObjects) Put(ctx context.Context, key string, body []byte) (string, error) {
	if err := f.fail(&f.puts, key); err != nil {
		return "", err
	}
	return f.ObjectStore.Put(ctx, key, body)
}

func (f *flakyObjects) Get(ctx context.Context, key string) (storage.Object, error) {
	if err := f.fail(&f.gets, key); err != nil {
		return storage.Object{}, err
	}
	return f.ObjectStore.Get(ctx, key)
}

// TestCommitSurvivesAnOutage: a handler finishes while S3 refuses both the
// commit and the re-read that would tell whether it landed. The outcome is
// retried until S3 answers: the task ends completed after one execution,
// its pointer gone, instead of being left running under a claim nobody
// renews (the CI soak once found a task stuck so, the commit having
// mistaken its own unsaved change for the stored state).
func TestCommitSurvivesAnOutage(t *testing.T) {
	e := newEnv(t, 2)
	flaky := &flakyObjects{}
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
		flaky.ObjectStore = s
		return flaky
	}
	var runs atomic.Int32 // executions
	e.start("solo", func(n *node, h *Host) {
		if err := h.RegisterFunc("outage", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			runs.Add(1)
			// The outage starts as the handler returns: three writes
			// and three reads of this task fail.
			flaky.arm(tk.ID, 3, 3)
			return json.RawMessage(`"done"`), nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitOwned(10 * time.Second)

	tk := e.submit(task.SubmitRequest{Type: "outage", MaxAttempts: 3})
	got := e.final(tk.Ref(), 20*time.Second)
	if got.Status != task.Completed || got.Attempt != 1 || string(got.Result) != `"done"` {
		t.Fatalf("task %s after %d attempts, result %s; want completed after 1", got.Status, got.Attempt, got.Result)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	flaky.mu.Lock()
	failed := flaky.failed
	flaky.mu.Unlock()
	if failed != 6 {
		t.Fatalf("%d calls failed, want the 6 injected", failed)
	}
	// The pointer goes right after the completing write.
	testenv.WaitFor(t, "the completed task's pointer to go", 10*time.Second, func() bool {
		ptrs, _, err := e.tasks.ListPointers(ctxFor(t, 5*time.Second), got.Shard, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ptrs {
			if p.ID == tk.ID {
				return false
			}
		}
		return true
	})
}

// TestRetriedTaskKeepsAPointer: a failed attempt is retried under a new
// ready pointer, and writing that pointer fails for a while. The task must
// never be left without a pointer: it runs again and completes. (The short
// soak in make test once lost a task so: the retry was committed first and
// its pointer write failed; the old pointer, then stale, was dropped by
// the next look at it, and nothing named the task any more.)
func TestRetriedTaskKeepsAPointer(t *testing.T) {
	e := newEnv(t, 2)
	flaky := &flakyObjects{}
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
		flaky.ObjectStore = s
		return flaky
	}
	var runs atomic.Int32
	n := e.start("solo", func(n *node, h *Host) {
		if err := h.RegisterFunc("stumble", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			if runs.Add(1) == 1 {
				flaky.mu.Lock()
				flaky.marker, flaky.puts = tk.ID, 2 // the retry's pointer: two writes fail
				flaky.mu.Unlock()
				return nil, fmt.Errorf("the first attempt fails")
			}
			return json.RawMessage(`"done"`), nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitOwned(10 * time.Second)

	tk := e.submit(task.SubmitRequest{Type: "stumble", MaxAttempts: 3})
	got := e.final(tk.Ref(), 20*time.Second)
	if got.Status != task.Completed || got.Attempt != 2 || runs.Load() != 2 {
		t.Fatalf("task %s after %d attempts and %d runs, want completed after 2", got.Status, got.Attempt, runs.Load())
	}
	flaky.mu.Lock()
	failed := flaky.failed
	flaky.mu.Unlock()
	if failed != 2 {
		t.Fatalf("%d pointer writes failed, want the 2 injected", failed)
	}
	e.waitNoPointer(got)
	// A retry's old pointer and a finished task's pointer are deleted by
	// the commits themselves: nothing stale was found.
	if v := testutil.ToFloat64(n.host.metrics.stalePointers); v != 0 {
		t.Fatalf("tenure_tasks_stale_pointers_total = %v, want 0", v)
	}
}

// TestStalePointerRestoresTheCurrentOne: a task was moved to a new due time
// and its new pointer never written (what a runner before this version left
// behind when its pointer write failed). The owner that reads the old,
// stale pointer writes the current one before deleting the stale one, and
// runs the task at its due time.
func TestStalePointerRestoresTheCurrentOne(t *testing.T) {
	e := newEnv(t, 2)
	var runs atomic.Int32
	n := e.start("solo", func(n *node, h *Host) {
		if err := h.RegisterFunc("moved", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			runs.Add(1)
			return json.RawMessage(`"done"`), nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitOwned(10 * time.Second)

	tk := e.submit(task.SubmitRequest{Type: "moved", Delay: 2 * time.Second})
	ctx := ctxFor(t, 10*time.Second)
	cur, etag, err := e.tasks.Load(ctx, tk.Shard, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	stale := cur.PointerKey()
	cur.AvailableAt = cur.AvailableAt.Add(time.Second) // its pointer is not written
	if _, err := e.tasks.Write(ctx, cur, etag); err != nil {
		t.Fatal(err)
	}
	if cur.PointerKey() == stale {
		t.Fatal("the task's pointer key did not change")
	}
	got := e.final(tk.Ref(), 15*time.Second)
	if got.Status != task.Completed || runs.Load() != 1 {
		t.Fatalf("task %s after %d runs, want completed after 1", got.Status, runs.Load())
	}
	for _, tr := range got.History {
		if tr.Event == task.EventClaimed && tr.At.Before(cur.AvailableAt) {
			t.Fatalf("claimed at %s, before its due time %s", tr.At, cur.AvailableAt)
		}
	}
	e.waitNoPointer(got)
	if v := testutil.ToFloat64(n.host.metrics.stalePointers); v != 1 {
		t.Fatalf("tenure_tasks_stale_pointers_total = %v, want 1 (the stale pointer)", v)
	}
}

// waitNoPointer waits until t, finished, has no ready pointer left.
func (e *env) waitNoPointer(t *task.Task) {
	e.t.Helper()
	testenv.WaitFor(e.t, "the finished task's pointers to go", 10*time.Second, func() bool {
		ptrs, _, err := e.tasks.ListPointers(ctxFor(e.t, 5*time.Second), t.Shard, "", 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, p := range ptrs {
			if p.ID == t.ID {
				return false
			}
		}
		return true
	})
}

// lostAnswers lets Replace calls on keys containing a marker reach S3 and
// then reports them failed, as a timeout after the write would.
type lostAnswers struct {
	storage.ObjectStore
	mu     sync.Mutex
	marker string
	left   int
}

func (l *lostAnswers) Replace(ctx context.Context, key string, body []byte, ifMatch string) (string, error) {
	etag, err := l.ObjectStore.Replace(ctx, key, body, ifMatch)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && l.marker != "" && l.left > 0 && strings.Contains(key, l.marker) {
		l.left--
		return "", fmt.Errorf("injected lost answer on %s: %w", key, storage.ErrUnavailable)
	}
	return etag, err
}

// TestCommitWithLostAnswerCountsOutcome: the outcome's write lands but its
// answer is lost. The commit re-reads the task, finds its own write there,
// and counts the attempt completed (tenure_tasks_attempts_total) — the
// count users and the bench read — not abandoned or not at all.
func TestCommitWithLostAnswerCountsOutcome(t *testing.T) {
	e := newEnv(t, 1)
	lost := &lostAnswers{}
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
		lost.ObjectStore = s
		return lost
	}
	n := e.start("solo", func(n *node, h *Host) {
		if err := h.RegisterFunc("lossy", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			lost.mu.Lock()
			lost.marker, lost.left = tk.ID, 1 // the outcome's write
			lost.mu.Unlock()
			return json.RawMessage(`"done"`), nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitOwned(10 * time.Second)
	tk := e.submit(task.SubmitRequest{Type: "lossy", MaxAttempts: 3})
	if got := e.final(tk.Ref(), 20*time.Second); got.Status != task.Completed || got.Attempt != 1 {
		t.Fatalf("task %s after %d attempts; want completed after 1", got.Status, got.Attempt)
	}
	e.waitNoPointer(tk)
	lost.mu.Lock()
	left := lost.left
	lost.mu.Unlock()
	if left != 0 {
		t.Fatal("no answer was lost")
	}
	if v := testutil.ToFloat64(n.host.metrics.attempts.WithLabelValues("lossy", outcomeCompleted)); v != 1 {
		t.Fatalf("completed attempts counted %v, want 1", v)
	}
	if v := testutil.ToFloat64(n.host.metrics.attempts.WithLabelValues("lossy", outcomeAbandoned)); v != 0 {
		t.Fatalf("abandoned attempts counted %v, want 0", v)
	}
}
