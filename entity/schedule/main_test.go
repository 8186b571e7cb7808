package schedule

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// t0 is the fake S3 time tests start at, with a fraction of a second so
// that tick rounding shows.
var t0 = time.Date(2026, 11, 22, 17, 5, 12, 123e6, time.UTC)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fakeClock is an S3 clock tests move by hand; with a step, every read
// also moves it on by the step, so that the times tasks are created at
// tell the order of their submits.
type fakeClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *fakeClock) setStep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = d
}

func (c *fakeClock) get() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) ServerTime(context.Context) (storage.ServerTime, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return storage.ServerTime{Now: c.now}, nil
}

// env is a schedule Client on a fresh prefix of the shared VersityGW
// bucket, whose task store reads the fake clock.
type env struct {
	c     *Client
	tasks *task.Client
	clock *fakeClock
	reg   *prometheus.Registry
	obj   *countingStore // the requests the task store and the client make
}

// countingStore counts the GETs and LISTs made through it.
type countingStore struct {
	storage.ObjectStore
	gets, lists atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string) (storage.Object, error) {
	c.gets.Add(1)
	return c.ObjectStore.Get(ctx, key)
}

func (c *countingStore) List(ctx context.Context, prefix string, o storage.ListOptions) (storage.ListPage, error) {
	c.lists.Add(1)
	return c.ObjectStore.List(ctx, prefix, o)
}

func newEnv(t *testing.T, shards int, opts ...Option) *env {
	t.Helper()
	gw := testenv.SharedS3(t)
	obj, err := s3store.New(gw.OwnClient(t), gw.Bucket(t), s3store.WithPrefix("tenure/"+testenv.Name(t, 40)+"/"))
	if err != nil {
		t.Fatalf("s3 store: %v", err)
	}
	clock := &fakeClock{now: t0}
	counted := &countingStore{ObjectStore: obj}
	tc, err := task.NewClient(task.NewStore(counted, task.WithClock(clock.ServerTime)), task.ClientConfig{Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c, err := NewClient(tc, append([]Option{WithShards(shards), WithRegistry(reg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &env{c: c, tasks: tc, clock: clock, reg: reg, obj: counted}
}

// task returns the task id of shard, failing the test when it is missing.
func (e *env) task(t *testing.T, shard storage.ShardID, id string) *task.Task {
	t.Helper()
	tk, err := e.tasks.Get(testCtx(t), task.Ref(shard, id))
	if err != nil {
		t.Fatalf("task %s/%s: %v", shard, id, err)
	}
	return tk
}

// taskIDs lists the ids of every task of the env, by type.
func (e *env) taskIDs(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	after := ""
	for {
		ts, next, err := e.tasks.List(testCtx(t), task.ListOptions{After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			out[tk.Type] = append(out[tk.Type], tk.ID)
		}
		if next == "" {
			return out
		}
		after = next
	}
}
