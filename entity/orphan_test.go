package entity

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
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

// failedCreate fails every Create: a submitter that wrote a task's
// pointer and died before writing its object.
type failedCreate struct{ storage.ObjectStore }

func (failedCreate) Create(context.Context, string, []byte) (string, error) {
	return "", errors.New("test: the submitter died before writing the task object")
}

// countedGets counts the reads of one task object (the looks at its
// pointer).
type countedGets struct {
	storage.ObjectStore
	suffix string
	n      atomic.Int64
}

func (c *countedGets) Get(ctx context.Context, key string) (storage.Object, error) {
	if strings.HasSuffix(key, c.suffix) {
		c.n.Add(1)
	}
	return c.ObjectStore.Get(ctx, key)
}

// TestOrphanWaitedOutOnceAcrossOwnerships: an entity's oldest pointer is
// a failed submission's (no task object), already older than OrphanWait
// in S3 time, and behind it the entity's head task was left running
// under an expired enforced claim of another runner and epoch. A fresh
// ownership (a new runner here; a re-attachment or a shard changing
// hands in the soak) leaves the orphan at its first look and takes the
// head over at once: it does not wait OrphanWait again, from its own
// first look, before the entity's tasks may go on. In the soak a runner
// detaching every few seconds under load waited the orphan out afresh at
// every re-attachment, and the entity's tasks stalled for twenty
// minutes.
func TestOrphanWaitedOutOnceAcrossOwnerships(t *testing.T) {
	e := newEnv(t, 1)
	e.ecfg.OrphanWait = 2 * time.Second
	e.ecfg.OrphanPointerAge = 10 * time.Minute
	e.ecfg.ReconcileInterval = time.Minute // one listing: this ownership's first

	// The failed submission: its pointer, no object.
	dead, err := task.NewClient(task.NewStore(failedCreate{e.newTaskStore().Objects()}), task.ClientConfig{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	orphanID := task.NewID()
	if _, _, err := dead.Submit(ctxFor(t, 10*time.Second), task.SubmitRequest{ID: orphanID, Type: "stall", Entity: "e1"}); err == nil {
		t.Fatal("the dead submitter's submission succeeded")
	}
	head := e.submit(task.SubmitRequest{Type: "stall", Entity: "e1", MaxAttempts: 5})
	next := e.submit(task.SubmitRequest{Type: "stall", Entity: "e1"})

	// The head: running under the expired enforced claim of a runner that
	// owned the shard at an earlier epoch.
	ctx := ctxFor(t, 10*time.Second)
	now, err := e.tasks.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ht, etag, err := e.tasks.Load(ctx, head.Shard, head.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := ht.ClaimFor(now.Earliest(), task.ClaimInfo{RunnerID: "gone", Epoch: 1, LeaseID: 1, Lease: time.Second, Enforced: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.tasks.Write(ctx, ht, etag); err != nil {
		t.Fatal(err)
	}

	// Earlier owners waited the orphan out: its pointer is older than
	// OrphanWait by the S3 clock (LastModified's second included).
	var written time.Time
	page, err := e.tasks.Objects().List(ctx, task.PointerPrefix(head.Shard), storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range page.Objects {
		if strings.Contains(o.Key, orphanID) {
			written = o.LastModified
		}
	}
	if written.IsZero() {
		t.Fatalf("no pointer of the failed submission %s listed in %+v", orphanID, page.Objects)
	}
	testenv.WaitFor(t, "the orphan pointer to be older than OrphanWait", 20*time.Second, func() bool {
		now, err := e.tasks.Now(ctxFor(t, 5*time.Second))
		return err == nil && now.Earliest().After(written.Add(time.Second+e.ecfg.OrphanWait))
	})

	looks := &countedGets{suffix: orphanID + ".json"}
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
		looks.ObjectStore = s
		return looks
	}
	started := make(chan int64, 2) // the orphan's looks when a handler starts
	e.start("fresh", func(n *node, h *Host) {
		if err := h.RegisterFunc("stall", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			if tk.ID == head.ID {
				started <- looks.n.Load()
			}
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	got := e.final(head.Ref(), 20*time.Second)
	if got.Status != task.Completed {
		t.Fatalf("head %s: %s", head.Ref(), got.Status)
	}
	if n := <-started; n != 1 {
		t.Errorf("the orphan was looked at %d times before the head started; want 1: it was waited out again", n)
	}
	taken := false
	for _, h := range got.History {
		taken = taken || (h.Event == task.EventTakenOver && h.Runner == "fresh")
	}
	if !taken {
		t.Errorf("head %s was not taken over by the fresh owner: %+v", head.Ref(), got.History)
	}
	if got := e.final(next.Ref(), 20*time.Second); got.Status != task.Completed {
		t.Fatalf("next %s: %s", next.Ref(), got.Status)
	}
}

// TestOrphanAge: a listed pointer's age is its S3 age, less
// LastModified's second, when that is longer than this ownership has
// seen it; a pointer not from a listing is as old as this ownership has
// seen it.
func TestOrphanAge(t *testing.T) {
	now := storage.ServerTime{Now: time.Date(2026, 11, 27, 19, 45, 0, 0, time.UTC), Uncertainty: 50 * time.Millisecond}
	for _, c := range []struct {
		name    string
		seen    time.Duration
		written time.Time
		want    time.Duration
	}{
		{"not listed", 3 * time.Second, time.Time{}, 3 * time.Second},
		{"written long ago", 0, now.Now.Add(-7 * time.Minute), 7*time.Minute - time.Second - 50*time.Millisecond},
		{"written just now", 200 * time.Millisecond, now.Now, 200 * time.Millisecond},
		{"seen longer than written", 30 * time.Second, now.Now.Add(-10 * time.Second), 30 * time.Second},
	} {
		if got := orphanAge(c.seen, c.written, now); got != c.want {
			t.Errorf("%s: orphanAge = %s, want %s", c.name, got, c.want)
		}
	}
}
