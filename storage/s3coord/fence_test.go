package s3coord_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/memstore"
	"github.com/tenurehq/tenure/storage/s3"
)

// hooked runs a function once before the first Create of a key, to
// interleave another party's writes with this store's.
type hooked struct {
	storage.ObjectStore
	beforeHook
}

func (h *hooked) beforeCreate(key string, f func()) { h.set(key, f) }

func (h *hooked) Create(ctx context.Context, key string, body []byte) (string, error) {
	h.run(key)
	return h.ObjectStore.Create(ctx, key, body)
}

// beforeHook is the function a test store (hooked, skewed) runs once
// before its first write of one kind to a key: a test places another
// party's write there.
type beforeHook struct {
	mu     sync.Mutex
	key    string
	before func()
}

func (h *beforeHook) set(key string, f func()) {
	h.mu.Lock()
	h.key, h.before = key, f
	h.mu.Unlock()
}

// run runs the function set for key, if it has not run yet, outside the
// lock: the function's own writes may come through this store.
func (h *beforeHook) run(key string) {
	h.mu.Lock()
	var f func()
	if key == h.key {
		f, h.before = h.before, nil
	}
	h.mu.Unlock()
	if f != nil {
		f()
	}
}

// fired reports whether the function set has run.
func (h *beforeHook) fired() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.key != "" && h.before == nil
}

// fenceRecord is the part of a runner record these tests read.
type fenceRecord struct {
	Lease     int64     `json:"lease"`
	Tombstone bool      `json:"tombstone"`
	Fence     bool      `json:"fence"`
	VacantAt  time.Time `json:"vacant_at"`
	Expires   time.Time `json:"expires"`
}

func readRecord(t *testing.T, o storage.ObjectStore, key string) fenceRecord {
	t.Helper()
	obj, err := o.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	var r fenceRecord
	if err := json.Unmarshal(obj.Body, &r); err != nil {
		t.Fatalf("decode %s: %v", key, err)
	}
	return r
}

// owned reports whether ss's VerifyShards says it owns shard0; a session
// that has ended owns nothing.
func owned(t *testing.T, ss storage.Session) bool {
	t.Helper()
	ver, err := ss.VerifyShards(ctxT(t), []storage.ShardID{shard0})
	if errors.Is(err, storage.ErrLeaseLost) || errors.Is(err, storage.ErrSessionClosed) {
		return false
	}
	if err != nil {
		t.Fatalf("VerifyShards: %v", err)
	}
	return ver[0].Owned
}

// TestVanishedRecordFenced: a live holder's runner record deleted or
// overwritten with garbage behind its back does not free its lock. The
// taker fences the lease and gets Held, with the holder's id, until the
// store's clock is certainly past the fence's vacant_at + the lock's TTL;
// then it takes the lock with a greater epoch. The holder's VerifyShards
// says Owned until its renewal fails (it acts until its deadline, which
// the wait outlasts); its KeepAlive reports ErrLeaseLost. At no moment do
// both own the shard.
func TestVanishedRecordFenced(t *testing.T) {
	const ttl = 4 * time.Second
	for name, vanish := range map[string]func(t *testing.T, mem *memstore.Store){
		"deleted": func(t *testing.T, mem *memstore.Store) {
			if err := mem.Delete(ctxT(t), "runners/a"); err != nil {
				t.Fatal(err)
			}
		},
		"undecodable": func(t *testing.T, mem *memstore.Store) {
			if _, err := mem.Put(ctxT(t), "runners/a", []byte("garbage")); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			clock := newFakeClock()
			mem := memstore.New(memstore.WithClock(clock.Now))
			a := registerRunner(t, open(t, mem), "a", ttl)
			b := registerRunner(t, open(t, mem), "b", ttl)
			first := acquire(t, a, shard0)
			if first.Status != storage.Acquired {
				t.Fatalf("first acquire: %+v", first)
			}
			both := func(when string) {
				t.Helper()
				ao, bo := owned(t, a), owned(t, b)
				if ao && bo {
					t.Fatalf("%s: both sessions own %v", when, shard0)
				}
			}
			vanish(t, mem)
			for _, step := range []time.Duration{0, ttl / 2, ttl / 2} {
				clock.Advance(step)
				if r := acquire(t, b, shard0); r.Status != storage.Held || r.Holder != "a" {
					t.Fatalf("acquire %s after the record vanished: %+v, want held by a", step, r)
				}
				both("while fenced")
			}
			fence := readRecord(t, mem, "runners/a")
			if !fence.Tombstone || !fence.Fence || fence.Lease != a.LeaseID() || fence.VacantAt.IsZero() ||
				!fence.Expires.Equal(fence.VacantAt.Add(ttl)) {
				t.Fatalf("runner record after the taker's look: %+v, want a fence of lease %x", fence, a.LeaseID())
			}
			// The holder still verifies its lock: it has not yet learned
			// of the loss, and acts until its deadline, which the wait
			// outlasts. Its renewal (its last confirmed expiry not yet
			// passed) meets the fence and loses the lease.
			if !owned(t, a) {
				t.Fatal("the holder lost its lock before the takeover")
			}
			if _, err := a.KeepAlive(ctxT(t)); !errors.Is(err, storage.ErrLeaseLost) {
				t.Fatalf("holder's renewal over the fence: %v, want ErrLeaseLost", err)
			}
			both("after the holder's renewal failed")
			if r := acquire(t, b, shard0); r.Status != storage.Held {
				t.Fatalf("acquire at vacant_at + TTL: %+v, want held", r)
			}
			clock.Advance(time.Millisecond)
			r := acquire(t, b, shard0)
			if r.Status != storage.Acquired || r.Epoch <= first.Epoch {
				t.Fatalf("acquire past the fence: %+v, want acquired above epoch %d", r, first.Epoch)
			}
			both("after the takeover")
			if !owned(t, b) {
				t.Fatal("the taker does not verify its lock")
			}
		})
	}
}

// TestFenceVersusRegistration races a re-registration of the holder's id
// with the taker's fence, in each order: exactly one Create lands, the
// registration succeeds either way (over the fence when it lost), and the
// lock is not taken before the vanished lease's TTL has run from the
// moment its record was seen gone.
func TestFenceVersusRegistration(t *testing.T) {
	const ttl = 4 * time.Second
	for _, order := range []string{"registration first", "fence first", "registration inside fence", "fence inside registration"} {
		t.Run(order, func(t *testing.T) {
			clock := newFakeClock()
			mem := memstore.New(memstore.WithClock(clock.Now))
			regObjs, takerObjs := &hooked{ObjectStore: mem}, &hooked{ObjectStore: mem}
			reg, taker := open(t, regObjs), open(t, takerObjs)
			a := registerRunner(t, open(t, mem), "a", ttl)
			b := registerRunner(t, taker, "b", ttl)
			first := acquire(t, a, shard0)
			if err := mem.Delete(ctxT(t), "runners/a"); err != nil {
				t.Fatal(err)
			}
			var again storage.Session
			register := func() {
				var err error
				again, err = reg.Register(ctxT(t), storage.RunnerInfo{ID: "a", Weight: 1, Groups: []string{"default"}}, ttl)
				if err != nil {
					t.Errorf("re-registration: %v", err)
				}
			}
			var held storage.AcquireResult
			take := func() { held = acquire(t, b, shard0) }
			switch order {
			case "registration first":
				register()
				take()
			case "fence first":
				take()
				register()
			case "registration inside fence":
				takerObjs.beforeCreate("runners/a", register)
				take()
			case "fence inside registration":
				regObjs.beforeCreate("runners/a", take)
				register()
			}
			if t.Failed() {
				t.FailNow()
			}
			if (order == "registration inside fence" && !takerObjs.fired()) || (order == "fence inside registration" && !regObjs.fired()) {
				t.Fatal("the interleaved write never ran")
			}
			if held.Status != storage.Held || held.Holder != "a" {
				t.Fatalf("acquire over the vanished record: %+v, want held by a", held)
			}
			rec := readRecord(t, mem, "runners/a")
			if rec.Tombstone || rec.Lease != again.LeaseID() || rec.VacantAt.IsZero() {
				t.Fatalf("runner record: %+v, want the re-registration (lease %x) with vacant_at", rec, again.LeaseID())
			}
			// Until vacant_at + TTL the old lease may act: Held, for the
			// taker and for the re-registered runner alike.
			clock.Advance(ttl)
			for _, ss := range []storage.Session{b, again} {
				if r := acquire(t, ss, shard0); r.Status != storage.Held {
					t.Fatalf("acquire at vacant_at + TTL by %s: %+v, want held", ss.RunnerID(), r)
				}
			}
			clock.Advance(time.Millisecond)
			if r := acquire(t, b, shard0); r.Status != storage.Acquired || r.Epoch <= first.Epoch {
				t.Fatalf("acquire past vacant_at + TTL: %+v, want acquired above epoch %d", r, first.Epoch)
			}
			if _, err := a.KeepAlive(ctxT(t)); !errors.Is(err, storage.ErrLeaseLost) {
				t.Fatalf("old holder's renewal: %v, want ErrLeaseLost", err)
			}
		})
	}
}

// TestLockWithoutTTLFenced: a lock written before locks named their
// holder's TTL, whose holder's record is gone, waits out the largest TTL
// Register accepts.
func TestLockWithoutTTLFenced(t *testing.T) {
	clock := newFakeClock()
	mem := memstore.New(memstore.WithClock(clock.Now))
	if _, err := mem.Put(ctxT(t), "shards/default/0", []byte(`{"rev":1,"runner_id":"old","lease":7,"epoch":3}`)); err != nil {
		t.Fatal(err)
	}
	b := registerRunner(t, open(t, mem), "b", 24*time.Hour)
	if r := acquire(t, b, shard0); r.Status != storage.Held || r.Holder != "old" {
		t.Fatalf("acquire of a lock whose holder has no record: %+v, want held by old", r)
	}
	clock.Advance(24 * time.Hour)
	if r := acquire(t, b, shard0); r.Status != storage.Held {
		t.Fatalf("acquire at 24h: %+v, want held", r)
	}
	clock.Advance(time.Millisecond)
	if r := acquire(t, b, shard0); r.Status != storage.Acquired || r.Epoch != 4 {
		t.Fatalf("acquire past 24h: %+v, want acquired at epoch 4", r)
	}
}

// listCount counts listings of runners/, so that a test can wait until
// the membership poller has run (and collected) after a change.
type listCount struct {
	storage.ObjectStore
	mu sync.Mutex
	n  int
}

func (c *listCount) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListPage, error) {
	if prefix == "runners/" {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return c.ObjectStore.List(ctx, prefix, opts)
}

func (c *listCount) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestOrphanedLockKeepsTombstone: the collector keeps a tombstone whose
// lease a lock still names, so that the lock of a runner that stopped
// without releasing is taken at once however late (no fence, no wait);
// once the lock is taken, the tombstone is collected.
func TestOrphanedLockKeepsTombstone(t *testing.T) {
	clock := newFakeClock()
	mem := memstore.New(memstore.WithClock(clock.Now))
	lc := &listCount{ObjectStore: mem}
	s := open(t, lc)
	gone := registerRunner(t, s, "gone", 2*time.Second)
	if r := acquire(t, gone, shard0); r.Status != storage.Acquired {
		t.Fatalf("acquire: %+v", r)
	}
	gone.Orphan()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	events := s.WatchMembership(ctx) // runs the poller
	<-events
	polled := func(what string) {
		t.Helper()
		n := lc.count()
		testenvWaitFor(t, what, func() bool { return lc.count() >= n+2 })
	}
	clock.Advance(2*time.Second + time.Minute + time.Second)
	testenvWaitFor(t, "the lapsed lease to be tombstoned", func() bool { return readRecord(t, mem, "runners/gone").Tombstone })
	clock.Advance(3 * time.Minute)
	polled("two more polls past the tombstone's retention")
	if rec := readRecord(t, mem, "runners/gone"); !rec.Tombstone || rec.Fence {
		t.Fatalf("record of the orphaned lock's lease: %+v, want its tombstone kept", rec)
	}
	b := registerRunner(t, s, "b", 2*time.Second)
	if r := acquire(t, b, shard0); r.Status != storage.Acquired {
		t.Fatalf("acquire of the orphaned lock: %+v, want acquired at once", r)
	}
	testenvWaitFor(t, "the tombstone to be collected once no lock names it", func() bool {
		_, err := mem.Get(ctxT(t), "runners/gone")
		return errors.Is(err, storage.ErrNotFound)
	})
}

// TestVanishedRecordFencedS3 is TestVanishedRecordFenced's deletion on
// VersityGW, with the gateway's clock and its coarse Date headers: the
// lock is Held while the fence stands and taken once the gateway's clock
// is certainly past vacant_at + TTL.
func TestVanishedRecordFencedS3(t *testing.T) {
	const ttl = 3 * time.Second
	gw := testenv.SharedS3(t)
	o, err := s3.New(gw.OwnClient(t), gw.Bucket(t), s3.WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a := registerRunner(t, open(t, o), "a", ttl)
	b := registerRunner(t, open(t, o), "b", ttl)
	first := acquire(t, a, shard0)
	if first.Status != storage.Acquired {
		t.Fatalf("first acquire: %+v", first)
	}
	if err := o.Delete(ctxT(t), "runners/a"); err != nil {
		t.Fatal(err)
	}
	if r := acquire(t, b, shard0); r.Status != storage.Held || r.Holder != "a" {
		t.Fatalf("acquire after the record vanished: %+v, want held by a", r)
	}
	fence := readRecord(t, o, "runners/a")
	if !fence.Fence || fence.Lease != a.LeaseID() {
		t.Fatalf("runner record: %+v, want a fence of lease %x", fence, a.LeaseID())
	}
	if _, err := a.KeepAlive(ctxT(t)); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("holder's renewal over the fence: %v, want ErrLeaseLost", err)
	}
	var got storage.AcquireResult
	testenv.WaitFor(t, "the lock to be taken past the fence", 30*time.Second, func() bool {
		got = acquire(t, b, shard0)
		if got.Status == storage.Held {
			return false
		}
		if got.Status != storage.Acquired || got.Epoch <= first.Epoch {
			t.Fatalf("acquire past the fence: %+v, want acquired above epoch %d", got, first.Epoch)
		}
		return true
	})
	st, err := o.ServerTime(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Latest().After(fence.Expires) {
		t.Fatalf("lock taken by gateway time %s (latest), not past the fence's end %s", st.Latest(), fence.Expires)
	}
}
