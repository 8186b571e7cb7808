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
