package task

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/memstore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// t0 is the fake S3 time tests start at: an instant with milliseconds, so
// rounding shows.
var t0 = time.Date(2026, 11, 22, 17, 5, 12, 123e6, time.UTC)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fakeClock is an S3 clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) ServerTime(context.Context) (storage.ServerTime, error) {
	return storage.ServerTime{Now: c.Now()}, nil
}

// wake is one recorded Waker call.
type wake struct {
	Shard storage.ShardID
	Key   string
}

// fakeWaker records wake-ups (the pointer key each note names, and its
// hint apart) and fails them with err when set.
type fakeWaker struct {
	mu    sync.Mutex
	calls []wake
	hints []*WakeHint // by call; nil for a note without one
	err   error
	// failures, when positive, fails that many calls more with
	// errWakeTransient.
	failures int
}

var errWakeTransient = errors.New("etcd briefly unreachable")

func (w *fakeWaker) Wake(ctx context.Context, shard storage.ShardID, note string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	key, _, _ := strings.Cut(note, "\n")
	n, _ := ParseWakeNote(note)
	w.calls = append(w.calls, wake{shard, key})
	w.hints = append(w.hints, n.Hint)
	if w.failures > 0 {
		w.failures--
		return errWakeTransient
	}
	return w.err
}

func (w *fakeWaker) Hints() []*WakeHint {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*WakeHint(nil), w.hints...)
}

func (w *fakeWaker) Calls() []wake {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wake(nil), w.calls...)
}

// env is a Client on a memstore with a fake clock and waker.
type env struct {
	mem   *memstore.Store
	clock *fakeClock
	waker *fakeWaker
	store *Store
	cli   *Client
}

func newEnv(t testing.TB, shards int, opts ...Option) *env {
	t.Helper()
	e := &env{clock: newFakeClock(), waker: &fakeWaker{}}
	e.mem = memstore.New(memstore.WithClock(e.clock.Now))
	e.store = NewStore(e.mem, append([]Option{WithClock(e.clock.ServerTime)}, opts...)...)
	cli, err := NewClient(e.store, ClientConfig{Shards: shards, Waker: e.waker})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	e.cli = cli
	return e
}

// submit submits req and fails the test on error.
func (e *env) submit(t testing.TB, req SubmitRequest) *Task {
	t.Helper()
	tk, created, err := e.cli.Submit(testCtx(t), req)
	if err != nil || !created {
		t.Fatalf("Submit(%+v) = created %v, %v", req, created, err)
	}
	return tk
}

// claim claims the task ref as runner r and returns it with its ETag.
func (e *env) claim(t testing.TB, ref string, c ClaimInfo) (*Task, string) {
	t.Helper()
	ctx := testCtx(t)
	shard, id, err := ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	tk, etag, err := e.store.Load(ctx, shard, id)
	if err != nil {
		t.Fatalf("Load %s: %v", ref, err)
	}
	if err := tk.ClaimFor(e.clock.Now(), c); err != nil {
		t.Fatalf("Claim %s: %v", ref, err)
	}
	etag, err = e.store.Write(ctx, tk, etag)
	if err != nil {
		t.Fatalf("Write claim of %s: %v", ref, err)
	}
	return tk, etag
}

// keys lists every key under prefix.
func (e *env) keys(t testing.TB, prefix string) []string {
	t.Helper()
	var out []string
	for o, err := range storage.Walk(testCtx(t), e.mem, prefix, "", 0) {
		if err != nil {
			t.Fatalf("Walk %s: %v", prefix, err)
		}
		out = append(out, o.Key)
	}
	return out
}

var runnerA = ClaimInfo{RunnerID: "runner-a", Epoch: 10, LeaseID: 100, Lease: 30 * time.Second}
var runnerB = ClaimInfo{RunnerID: "runner-b", Epoch: 11, LeaseID: 200, Lease: 30 * time.Second}
