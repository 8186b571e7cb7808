package entity

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/s3count"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// heldWaker holds wake-ups until release passes them on to w.
type heldWaker struct {
	w     task.Waker
	mu    sync.Mutex
	notes []heldNote
}

type heldNote struct {
	shard storage.ShardID
	note  string
}

func (h *heldWaker) Wake(_ context.Context, shard storage.ShardID, note string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notes = append(h.notes, heldNote{shard, note})
	return nil
}

func (h *heldWaker) release(ctx context.Context) error {
	h.mu.Lock()
	notes := h.notes
	h.notes = nil
	h.mu.Unlock()
	for _, n := range notes {
		if err := h.w.Wake(ctx, n.shard, n.note); err != nil {
			return err
		}
	}
	return nil
}

// TestStaleWakeHintFallsBack: a wake-up whose hint is older than the task
// object (written again meanwhile, as a cancel request or a replay does)
// makes the runner claim If-Match on the hint's ETag; S3 refuses it (412),
// and the runner reads the task and claims that version instead: the task
// runs once and completes, at the cost of the refused PUT and one GET.
func TestStaleWakeHintFallsBack(t *testing.T) {
	e := newEnv(t, 1)
	held := &heldWaker{}
	runnersWire, _, client := e.countOnWireWith(func(c *task.ClientConfig) {
		held.w = c.Waker
		c.Waker = held
	})
	e.start("solo", e.standard)
	e.waitOwned(10 * time.Second)
	testenv.WaitFor(t, "initial reconciliation", 10*time.Second, func() bool { return runnersWire.Counts().Requests[s3count.OpList] >= 1 })
	before := runnersWire.Counts()
	tk, _, err := client.Submit(ctxFor(t, 30*time.Second), task.SubmitRequest{Type: "job"})
	if err != nil {
		t.Fatal(err)
	}
	// Write the task again: same content, a new revision and ETag.
	cur, etag, err := e.tasks.Load(ctxFor(t, 10*time.Second), tk.Shard, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.tasks.Write(ctxFor(t, 10*time.Second), cur, etag); err != nil {
		t.Fatal(err)
	}
	if err := held.release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	got := e.final(tk.Ref(), 30*time.Second)
	if got.Status != task.Completed || got.Attempt != 1 {
		t.Fatalf("task %s attempt %d, want completed at the first attempt", got.Status, got.Attempt)
	}
	if runs := e.rec.Starts(); runs != 1 {
		t.Fatalf("%d runs, want 1", runs)
	}
	wire := runnersWire.Counts().Sub(before)
	t.Logf("runner's requests on the wire: %s", wire)
	if refused := wire.Answered(s3count.OpReplace, http.StatusPreconditionFailed); refused != 1 {
		t.Errorf("%d claims refused with 412, want the stale hint's 1", refused)
	}
	if gets := wire.Requests[s3count.OpGet]; gets != 1 {
		t.Errorf("%d GET, want the fallback's 1", gets)
	}
}
