package s3coord_test

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
	"github.com/tenurehq/tenure/storage/s3coord"
)

// fakeClock is a settable clock for memstore's ServerTime.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// skewed answers ServerTime with a given uncertainty around the true time,
// as an estimate from coarse Date headers would; a function set by
// beforeReplace runs once before the first Replace of its key, to
// interleave another party's writes with this store's.
type skewed struct {
	storage.ObjectStore
	uncertainty time.Duration
	beforeHook
}

func (s *skewed) ServerTime(ctx context.Context) (storage.ServerTime, error) {
	st, err := s.ObjectStore.ServerTime(ctx)
	st.Uncertainty = s.uncertainty
	return st, err
}

func (s *skewed) beforeReplace(key string, f func()) { s.set(key, f) }

func (s *skewed) Replace(ctx context.Context, key string, body []byte, ifMatch string) (string, error) {
	s.run(key)
	return s.ObjectStore.Replace(ctx, key, body, ifMatch)
}

func open(t *testing.T, o storage.ObjectStore) *s3coord.Store {
	t.Helper()
	s, err := s3coord.New(o, storeOpts("mem")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func registerRunner(t *testing.T, s *s3coord.Store, id string, ttl time.Duration) storage.Session {
	t.Helper()
	ss, err := s.Register(ctxT(t), storage.RunnerInfo{ID: id, Weight: 1, Groups: []string{"default"}}, ttl)
	if err != nil {
		t.Fatalf("Register(%s): %v", id, err)
	}
	return ss
}

func acquire(t *testing.T, ss storage.Session, sh storage.ShardID) storage.AcquireResult {
	t.Helper()
	res, err := ss.AcquireShards(ctxT(t), []storage.ShardID{sh})
	if err != nil {
		t.Fatalf("AcquireShards: %v", err)
	}
	return res[0]
}

var shard0 = storage.ShardID{Group: "default", Index: 0}

// TestTombstoneVersusRenewal interleaves a holder's renewal with another
// runner's takeover of its lock, in each order: the holder's clock
// estimate is wide (it cannot tell its lease lapsed), the taker's exact
// (it can). At most one wins, and a lock is never taken from a lease that
// then renews.
func TestTombstoneVersusRenewal(t *testing.T) {
	const ttl = 2 * time.Second
	for _, order := range []string{"takeover first", "renewal first", "renewal inside takeover", "takeover inside renewal"} {
		t.Run(order, func(t *testing.T) {
			clock := newFakeClock()
			mem := memstore.New(memstore.WithClock(clock.Now))
			holderObjs := &skewed{ObjectStore: mem, uncertainty: 3 * time.Second}
			takerObjs := &skewed{ObjectStore: mem}
			holder, taker := open(t, holderObjs), open(t, takerObjs)
			a := registerRunner(t, holder, "a", ttl)
			first := acquire(t, a, shard0)
			b := registerRunner(t, taker, "b", time.Minute)
			// Past a's expiry by 1s: certainly lapsed for the taker, not
			// for the holder, whose estimate is 3s wide (each way).
			clock.Advance(ttl + 3*time.Second + time.Second)

			var renewErr error
			var took storage.AcquireResult
			renew := func() { _, renewErr = a.KeepAlive(ctxT(t)) }
			take := func() { took = acquire(t, b, shard0) }
			switch order {
			case "takeover first":
				take()
				renew()
			case "renewal first":
				renew()
				take()
			case "renewal inside takeover":
				// The taker has read a's record and judged it lapsed; the
				// renewal lands before its tombstone does.
				takerObjs.beforeReplace("runners/a", renew)
				take()
			case "takeover inside renewal":
				// The holder is about to write its renewal; the takeover
				// (tombstone, then the lock) completes first.
				holderObjs.beforeReplace("runners/a", take)
				renew()
			}
			renewed := renewErr == nil
			taken := took.Status == storage.Acquired
			if renewed == taken {
				t.Fatalf("renewal err %v, takeover %+v: want exactly one to win", renewErr, took)
			}
			if taken {
				if !errors.Is(renewErr, storage.ErrLeaseLost) {
					t.Fatalf("renewal after the takeover: %v, want ErrLeaseLost", renewErr)
				}
				if took.Epoch <= first.Epoch {
					t.Fatalf("takeover epoch %d not above the holder's %d", took.Epoch, first.Epoch)
				}
				select {
				case <-a.Done():
				default:
					t.Fatal("the holder's session did not end")
				}
				if _, err := a.KeepAlive(ctxT(t)); !errors.Is(err, storage.ErrLeaseLost) {
					t.Fatalf("a later renewal: %v, want ErrLeaseLost (a lapsed lease never revives)", err)
				}
				return
			}
			if took.Status != storage.Held || took.Holder != "a" {
				t.Fatalf("takeover after the renewal: %+v, want held by a", took)
			}
			ver, err := a.VerifyShards(ctxT(t), []storage.ShardID{shard0})
			if err != nil || !ver[0].Owned || ver[0].Epoch != first.Epoch {
				t.Fatalf("the renewed holder's lock: %+v, %v", ver, err)
			}
		})
	}
}

// TestEpochsIncrease: the fencing epoch grows across every change of
// holder: release and re-acquire, takeover from a lapsed lease, and a lock
// object removed behind the store's back.
func TestEpochsIncrease(t *testing.T) {
	clock := newFakeClock()
	mem := memstore.New(memstore.WithClock(clock.Now))
	s := open(t, mem)
	a := registerRunner(t, s, "a", time.Minute)
	b := registerRunner(t, s, "b", 2*time.Second)
	var epochs []int64
	take := func(ss storage.Session, what string) {
		t.Helper()
		r := acquire(t, ss, shard0)
		if r.Status != storage.Acquired {
			t.Fatalf("%s: %+v", what, r)
		}
		if n := len(epochs); n > 0 && r.Epoch <= epochs[n-1] {
			t.Fatalf("%s: epoch %d after %v", what, r.Epoch, epochs)
		}
		epochs = append(epochs, r.Epoch)
	}
	take(a, "first acquire")
	if again := acquire(t, a, shard0); again.Epoch != epochs[0] {
		t.Fatalf("re-acquire by the holder: epoch %d, want %d", again.Epoch, epochs[0])
	}
	if err := a.ReleaseShard(ctxT(t), shard0); err != nil {
		t.Fatal(err)
	}
	take(b, "acquire after release")
	if r := acquire(t, a, shard0); r.Status != storage.Held || r.Holder != "b" {
		t.Fatalf("acquire of b's live lock: %+v", r)
	}
	clock.Advance(3 * time.Second) // b's lease lapses (a's has a minute)
	take(a, "takeover from a lapsed lease")
	if _, err := b.KeepAlive(ctxT(t)); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("renewal of the lapsed lease: %v, want ErrLeaseLost", err)
	}
	if err := a.ReleaseShard(ctxT(t), shard0); err != nil {
		t.Fatal(err)
	}
	if err := mem.Delete(ctxT(t), "shards/default/0"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Millisecond) // the store's clock moves on
	take(a, "acquire after the lock object was removed")
}

// TestRenewalAnswerLost: a renewal that landed but whose answer was lost
// is recognised: at once when the retried write's 412 leads to a re-read
// showing our own renewal, and at the next renewal when the call failed.
func TestRenewalAnswerLost(t *testing.T) {
	mem := memstore.New()
	s := open(t, mem)
	ss := registerRunner(t, s, "r", 10*time.Second)
	// As an SDK retry of a write that had landed: 412 after applying.
	inj := mem.Inject(memstore.Fault{Op: memstore.OpReplace, Key: "runners/r", When: memstore.AfterApply, Err: storage.ErrPrecondition, Times: 1})
	res, err := ss.KeepAlive(ctxT(t))
	if err != nil || res.TTL != ss.TTL() {
		t.Fatalf("renewal whose 412 hid its own success: %+v, %v", res, err)
	}
	inj.Remove()
	// The answer lost altogether: the call fails, the next one renews on
	// top of the version it wrote.
	mem.Inject(memstore.Fault{Op: memstore.OpReplace, Key: "runners/r", When: memstore.AfterApply, Err: storage.ErrUnavailable, Times: 1})
	if _, err := ss.KeepAlive(ctxT(t)); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("renewal with its answer lost: %v, want ErrUnavailable", err)
	}
	res, err = ss.KeepAlive(ctxT(t))
	if err != nil || res.TTL != ss.TTL() {
		t.Fatalf("the renewal after a lost answer: %+v, %v", res, err)
	}
	if err := ss.UpdateRunner(ctxT(t), storage.RunnerInfo{ID: "r", Weight: 2, Groups: []string{"default"}}); err != nil {
		t.Fatalf("UpdateRunner after the renewals: %v", err)
	}
}

// TestLapseUsesEarliest: a lease is lapsed only once the earliest the
// store's clock can read is past its expiry.
func TestLapseUsesEarliest(t *testing.T) {
	clock := newFakeClock()
	mem := memstore.New(memstore.WithClock(clock.Now))
	holder := open(t, mem)
	ss := registerRunner(t, holder, "h", 2*time.Second)
	if r := acquire(t, ss, shard0); r.Status != storage.Acquired {
		t.Fatal(r)
	}
	ss.Orphan()
	clock.Advance(3 * time.Second) // a second past expiry
	wide := &skewed{ObjectStore: mem, uncertainty: 2 * time.Second}
	narrow := &skewed{ObjectStore: mem, uncertainty: 500 * time.Millisecond}
	w, n := open(t, wide), open(t, narrow)

	// Wide: the earliest reading is a second before expiry: still live.
	list, _, err := w.Runners(ctxT(t))
	if err != nil || len(list) != 1 {
		t.Fatalf("Runners with a 2s-wide clock: %+v, %v; want h still listed", list, err)
	}
	if _, err := w.LeaseTimeToLive(ctxT(t), ss.LeaseID()); err != nil {
		t.Fatalf("LeaseTimeToLive with a 2s-wide clock: %v", err)
	}
	wt := registerRunner(t, w, "wide-taker", time.Minute)
	if r := acquire(t, wt, shard0); r.Status != storage.Held {
		t.Fatalf("takeover with a 2s-wide clock: %+v, want held", r)
	}

	// Narrow: certainly past.
	list, _, err = n.Runners(ctxT(t))
	if err != nil || len(list) != 1 || list[0].ID != "wide-taker" {
		t.Fatalf("Runners with a 0.5s-wide clock: %+v, %v; want h gone", list, err)
	}
	if _, err := n.LeaseTimeToLive(ctxT(t), ss.LeaseID()); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("LeaseTimeToLive of the lapsed lease: %v, want ErrNotFound", err)
	}
	nt := registerRunner(t, n, "narrow-taker", time.Minute)
	if r := acquire(t, nt, shard0); r.Status != storage.Acquired {
		t.Fatalf("takeover with a 0.5s-wide clock: %+v, want acquired", r)
	}
}

// TestCorruptObjects: undecodable objects are reported as ErrCorrupt
// naming their key, never a panic, and never taken for something else.
func TestCorruptObjects(t *testing.T) {
	mem := memstore.New()
	s := open(t, mem)
	ctx := ctxT(t)
	for key, body := range map[string]string{
		"shards/default/0": "{",
		"shards/default/1": `{"rev":1,"epoch":0}`,
		"shards/default/2": `{"rev":1,"epoch":1,"lease":5,"runner_id":"a/b"}`,
		"shards/nope":      `{"rev":1,"epoch":1}`,
		"runners/x":        `{"rev":1,"lease":1}`,
		"runners/y":        `null`,
		"config":           `{"rev":"one"}`,
		"wake/default/0/1": `{}`,
	} {
		if _, err := mem.Put(ctx, key, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	ss := registerRunner(t, s, "ok", time.Minute)
	res, err := ss.AcquireShards(ctx, shards3())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != storage.Failed || !errors.Is(r.Err, storage.ErrCorrupt) {
			t.Errorf("acquire over a corrupt lock %v: %+v", r.Shard, r)
		}
	}
	ver, err := ss.VerifyShards(ctx, shards3())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range ver {
		if v.Owned {
			t.Errorf("verify of a corrupt lock: %+v", v)
		}
	}
	if err := ss.ReleaseShard(ctx, shard0); !errors.Is(err, storage.ErrCorrupt) {
		t.Errorf("release of a corrupt lock: %v, want ErrCorrupt", err)
	}
	if _, _, err := s.ShardLocks(ctx); !errors.Is(err, storage.ErrCorrupt) {
		t.Errorf("ShardLocks: %v, want ErrCorrupt", err)
	}
	if _, _, err := s.Runners(ctx); !errors.Is(err, storage.ErrCorrupt) {
		t.Errorf("Runners: %v, want ErrCorrupt", err)
	}
	if _, err := s.Register(ctx, storage.RunnerInfo{ID: "x", Weight: 1}, time.Minute); !errors.Is(err, storage.ErrCorrupt) {
		t.Errorf("Register over a corrupt record: %v, want ErrCorrupt", err)
	}
	if _, err := s.Config(ctx); !errors.Is(err, storage.ErrCorrupt) {
		t.Errorf("Config: %v, want ErrCorrupt", err)
	}
	if _, err := s.PutConfig(ctx, []byte("{}"), 5); !errors.Is(err, storage.ErrCorrupt) {
		t.Errorf("PutConfig over a corrupt config: %v, want ErrCorrupt", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	locks := s.WatchShardLocks(wctx)
	bad := 0
	for bad < 4 {
		select {
		case ev := <-locks:
			if ev.Err == nil || !errors.Is(ev.Err, storage.ErrCorrupt) {
				t.Fatalf("lock event %+v, want ErrCorrupt", ev)
			}
			bad++
		case <-time.After(5 * time.Second):
			t.Fatalf("%d corrupt lock events, want 4", bad)
		}
	}
	wakes, err := s.WatchWakes(wctx, shard0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wake(ctx, shard0, "after"); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-wakes:
		if ev.Note != "after" {
			t.Fatalf("wake %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up")
	}
}

func shards3() []storage.ShardID {
	return []storage.ShardID{{Group: "default", Index: 0}, {Group: "default", Index: 1}, {Group: "default", Index: 2}}
}

// TestOptionsValidated: bad options are refused with ErrInvalid naming
// them, before any request.
func TestOptionsValidated(t *testing.T) {
	for name, opt := range map[string]s3coord.Option{
		"request timeout": s3coord.WithRequestTimeout(0),
		"poll interval":   s3coord.WithPollInterval(time.Second, time.Millisecond),
		"logger":          s3coord.WithLogger(nil),
		"clock":           s3coord.WithClock(nil),
	} {
		if _, err := s3coord.New(memstore.New(), opt); !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("option %s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s3coord.New(nil); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("nil object store: %v", err)
	}
}

// TestRecordsCollected: the membership poller tombstones a lease lapsed
// for longer than the retention, and deletes a tombstone older than it.
func TestRecordsCollected(t *testing.T) {
	clock := newFakeClock()
	mem := memstore.New(memstore.WithClock(clock.Now))
	s := open(t, mem)
	gone := registerRunner(t, s, "gone", 2*time.Second)
	gone.Orphan()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	events := s.WatchMembership(ctx) // runs the poller
	<-events
	body := func() string {
		obj, err := mem.Get(ctxT(t), "runners/gone")
		if errors.Is(err, storage.ErrNotFound) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(obj.Body)
	}
	clock.Advance(2*time.Second + time.Minute + time.Second)
	testenvWaitFor(t, "the lapsed lease to be tombstoned", func() bool { return strings.Contains(body(), `"tombstone":true`) })
	clock.Advance(time.Minute + time.Second)
	testenvWaitFor(t, "the old tombstone to be deleted", func() bool { return body() == "" })
}

func testenvWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, what, 10*time.Second, cond)
}

// TestAcquireAnswerLost: a lock write that landed without an answer is
// resolved by reading the lock again: it is ours, at the epoch written.
func TestAcquireAnswerLost(t *testing.T) {
	mem := memstore.New()
	s := open(t, mem)
	ss := registerRunner(t, s, "r", time.Minute)
	mem.Inject(memstore.Fault{Op: memstore.OpCreate, Key: "shards/default/0", When: memstore.AfterApply, Err: storage.ErrUnavailable, Times: 1})
	r := acquire(t, ss, shard0)
	if r.Status != storage.Acquired {
		t.Fatalf("acquire whose create answer was lost: %+v", r)
	}
	ver, err := ss.VerifyShards(ctxT(t), []storage.ShardID{shard0})
	if err != nil || !ver[0].Owned || ver[0].Epoch != r.Epoch {
		t.Fatalf("verify: %+v, %v (acquired at epoch %d)", ver, err, r.Epoch)
	}
	// Twice without an answer: reported, not retried without end.
	other := registerRunner(t, s, "o", time.Minute)
	sh := storage.ShardID{Group: "default", Index: 1}
	mem.Inject(memstore.Fault{Op: memstore.OpCreate, Key: "shards/default/1", Err: storage.ErrUnavailable, Times: 2})
	if r := acquire(t, other, sh); r.Status != storage.Failed || !errors.Is(r.Err, storage.ErrUnavailable) {
		t.Fatalf("acquire failing twice: %+v, want failed, unavailable", r)
	}
}

// TestRegisterAnswerLost: a registration whose write landed but was
// answered 412 (an SDK retry losing to the first attempt) is recognised
// by its own lease and renewal, not refused as a duplicate.
func TestRegisterAnswerLost(t *testing.T) {
	mem := memstore.New()
	s := open(t, mem)
	mem.Inject(memstore.Fault{Op: memstore.OpCreate, Key: "runners/r", When: memstore.AfterApply, Err: storage.ErrPrecondition, Times: 1})
	ss := registerRunner(t, s, "r", time.Minute)
	if _, err := ss.KeepAlive(ctxT(t)); err != nil {
		t.Fatalf("renewal of the recognised registration: %v", err)
	}
	if _, err := s.Register(ctxT(t), storage.RunnerInfo{ID: "r", Weight: 1}, time.Minute); !errors.Is(err, storage.ErrRunnerExists) {
		t.Fatalf("a second registration: %v, want ErrRunnerExists", err)
	}
}
