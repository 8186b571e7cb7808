package entity

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// gatedCreate holds a submitter's first Create (the task object, written
// after the pointer) until released.
type gatedCreate struct {
	storage.ObjectStore
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func (g *gatedCreate) Create(ctx context.Context, key string, body []byte) (string, error) {
	g.once.Do(func() {
		close(g.reached)
		<-g.release
	})
	return g.ObjectStore.Create(ctx, key, body)
}

// gatedMiss holds the first Get of a task object that finds nothing until
// released, as a slow answer would.
type gatedMiss struct {
	storage.ObjectStore
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func (g *gatedMiss) Get(ctx context.Context, key string) (storage.Object, error) {
	obj, err := g.ObjectStore.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) && strings.HasSuffix(key, ".json") {
		g.once.Do(func() {
			close(g.reached)
			<-g.release
		})
	}
	return obj, err
}

// TestOrphanWokenWhileLookedAt: a runner lists a submission's pointer
// before its task object exists, and the submission's wake-up arrives while
// the runner is finding the object missing. The task starts at once rather
// than at the next reconciliation (a minute away here): the wake-up is not
// taken for a duplicate of the pointer already known.
func TestOrphanWokenWhileLookedAt(t *testing.T) {
	e := newEnv(t, 1)
	e.ecfg.ReconcileInterval = time.Minute
	miss := &gatedMiss{reached: make(chan struct{}), release: make(chan struct{})}
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
		miss.ObjectStore = s
		return miss
	}
	gate := &gatedCreate{reached: make(chan struct{}), release: make(chan struct{})}
	base := e.newTaskStore()
	gate.ObjectStore = base.Objects()
	waker, err := etcd.New(e.srv.Client(t), etcd.WithPrefix(e.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waker.Close() })
	client, err := task.NewClient(task.NewStore(gate), task.ClientConfig{Shards: 1, Waker: waker})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		t   *task.Task
		err error
	}
	submitted := make(chan result, 1)
	go func() {
		tk, _, err := client.Submit(context.Background(), task.SubmitRequest{Type: "late", Entity: "e1"})
		submitted <- result{tk, err}
	}()
	waitClosed(t, gate.reached, "the pointer to be written")

	// The runner starts now: its first listing finds the pointer alone.
	ran := make(chan struct{}, 1)
	n := e.start("solo", func(n *node, h *Host) {
		if err := h.RegisterFunc("late", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			select {
			case ran <- struct{}{}:
			default: // a second run does not block the handler
			}
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	waitClosed(t, miss.reached, "the runner to find the task object missing")

	// The submission completes and wakes the runner while it looks.
	close(gate.release)
	r := <-submitted
	if r.err != nil {
		t.Fatal(r.err)
	}
	testenv.WaitFor(t, "the wake-up to reach the runner", 10*time.Second, func() bool {
		return testutil.ToFloat64(n.host.metrics.wakeups) >= 1
	})
	close(miss.release)

	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatalf("task %s did not start within 10s of its wake-up (reconciliation is a minute away)", r.t.Ref())
	}
	if got := e.final(r.t.Ref(), 10*time.Second); got.Status != task.Completed {
		t.Fatalf("task %s", got.Status)
	}
}

func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
