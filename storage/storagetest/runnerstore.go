package storagetest

// This file is past the ~500-line mark on purpose: it is the one
// conformance suite of the RunnerStore port, a list of independent
// subtests that an adapter author reads top to bottom against the port's
// contract; split by concept it would be the port's narrow interfaces
// (storage/runner.go), a split that waits for the suite to be run per
// port.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv/poll"
	"github.com/tenurehq/tenure/storage"
)

// RunnerStoreHarness opens runner stores for TestRunnerStore and acts on
// their backend behind their backs, as an operator or a network would.
type RunnerStoreHarness struct {
	// Open returns a new store in namespace ns, as a separate runner process
	// would open it: stores opened with the same ns share one cluster, and
	// namespaces are isolated. The harness closes it at cleanup.
	Open func(t *testing.T, ns string) storage.RunnerStore
	// Namespace returns a fresh namespace.
	Namespace func(t *testing.T) string
	// RevokeLease revokes a lease.
	RevokeLease func(t *testing.T, leaseID int64)
	// DeleteKey deletes a key relative to ns's prefix ("shards/default/3").
	DeleteKey func(t *testing.T, ns, key string)
	// PutRaw writes a raw value at a key relative to ns's prefix.
	PutRaw func(t *testing.T, ns, key string, value []byte)
	// Isolate makes every request of store s hang (a network partition)
	// until heal is called.
	Isolate func(t *testing.T, s storage.RunnerStore) (heal func())
	// Disconnect drops store s's connections and refuses new ones until heal
	// is called.
	Disconnect func(t *testing.T, s storage.RunnerStore) (heal func())
	// Compact discards the backend's history up to its current revision.
	// A backend that keeps no history (one that polls) does nothing.
	Compact func(t *testing.T)

	// WatchDelay is the backend's bound on how long after a change a
	// watch delivers it, for backends whose watches poll: the longest poll
	// interval in force right after a change, plus a read. Zero means the
	// bound the suite holds etcd's pushed watches to (100ms).
	WatchDelay time.Duration
	// WatchCoalesces says that the backend's watches poll: changes made
	// between two polls arrive as one batch of their net effect (in
	// revision order), so a test that checks each change's event waits
	// for it before making the next.
	WatchCoalesces bool
	// LeaseSlack is how far past its TTL the backend may take to end a
	// lease nobody renewed, and so how far past the TTL LeaseTimeToLive
	// may bound the time left. Zero means etcd's: one second, for the
	// whole seconds it counts in. A backend that judges expiry on an
	// estimated clock states its estimate's width here.
	LeaseSlack time.Duration
}

// leaseSlack returns h.LeaseSlack, or etcd's one second when it is zero.
func (h RunnerStoreHarness) leaseSlack() time.Duration {
	if h.LeaseSlack > 0 {
		return h.LeaseSlack
	}
	return time.Second
}

// watchDelay returns h.WatchDelay, or etcd's bound when it is zero.
func (h RunnerStoreHarness) watchDelay() time.Duration {
	if h.WatchDelay > 0 {
		return h.WatchDelay
	}
	return 100 * time.Millisecond
}

// TestRunnerStore runs the runner-store conformance suite.
func TestRunnerStore(t *testing.T, h RunnerStoreHarness) {
	t.Run("Meta", func(t *testing.T) { testMeta(t, h) })
	t.Run("MetaCorrupt", func(t *testing.T) { testMetaCorrupt(t, h) })
	t.Run("RegisterAndList", func(t *testing.T) { testRegisterAndList(t, h) })
	t.Run("DuplicateRunner", func(t *testing.T) { testDuplicateRunner(t, h) })
	t.Run("ConcurrentRegisterOneWinner", func(t *testing.T) { testConcurrentRegister(t, h) })
	t.Run("InvalidInput", func(t *testing.T) { testInvalidInput(t, h) })
	t.Run("CorruptRunnerRecord", func(t *testing.T) { testCorruptRunner(t, h) })
	t.Run("UpdateRunner", func(t *testing.T) { testUpdateRunner(t, h) })
	t.Run("CloseRevokes", func(t *testing.T) { testCloseRevokes(t, h) })
	t.Run("KeepAliveReports", func(t *testing.T) { testKeepAliveReports(t, h) })
	t.Run("KeepAliveFailuresReported", func(t *testing.T) { testKeepAliveFailures(t, h) })
	t.Run("LeaseExpiry", func(t *testing.T) { testLeaseExpiry(t, h) })
	t.Run("LeaseLostAfterRevoke", func(t *testing.T) { testLeaseLostAfterRevoke(t, h) })
	t.Run("LeaseTimeToLive", func(t *testing.T) { testLeaseTimeToLive(t, h) })
	t.Run("KeepAliveAfterExpiry", func(t *testing.T) { testKeepAliveAfterExpiry(t, h) })
	t.Run("Locks", func(t *testing.T) { testLocks(t, h) })
	t.Run("ConcurrentAcquireOneOwner", func(t *testing.T) { testConcurrentAcquire(t, h) })
	t.Run("HandoffWokenByWatch", func(t *testing.T) { testHandoffByWatch(t, h) })
	t.Run("VerifyDetectsDeletedLock", func(t *testing.T) { testVerifyDetectsDelete(t, h) })
	t.Run("WatchRunnerChanges", func(t *testing.T) { testWatchRunners(t, h) })
	t.Run("WatchShardLocks", func(t *testing.T) { testWatchShardLocks(t, h) })
	t.Run("WatchMembership", func(t *testing.T) { testWatchMembership(t, h) })
	t.Run("WatchMembershipResumesAfterCompaction", func(t *testing.T) { testWatchMembershipResume(t, h) })
	t.Run("MembershipListing", func(t *testing.T) { testMembershipListing(t, h) })
	t.Run("Config", func(t *testing.T) { testConfig(t, h) })
	t.Run("WatchResumesAfterDisconnect", func(t *testing.T) { testWatchResume(t, h, false) })
	t.Run("WatchResumesAfterCompaction", func(t *testing.T) { testWatchResume(t, h, true) })
	t.Run("Wake", func(t *testing.T) { testWake(t, h) })
	t.Run("UnavailableIsBounded", func(t *testing.T) { testUnavailableBounded(t, h) })
	t.Run("CloseEndsWatchesAndSessions", func(t *testing.T) { testStoreClose(t, h) })
}

// Lease TTLs the suite registers with: short where the test waits for an
// expiry, longer where the lease must survive a partition of a few seconds.
const (
	shortTTL = 2 * time.Second
	longTTL  = 8 * time.Second
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func runner(id string) storage.RunnerInfo {
	return storage.RunnerInfo{ID: id, Addr: "127.0.0.1:1", Weight: 1, Groups: []string{storage.DefaultGroup}, Version: "test"}
}

// register registers runner id and keeps its lease alive on the default
// cadence until the session ends, as a runner would.
func register(t *testing.T, s storage.RunnerStore, id string, ttl time.Duration) storage.Session {
	t.Helper()
	ss := registerBare(t, s, id, ttl)
	go storage.KeepAliveLoop(context.Background(), ss, storage.KeepAliveCadence{}, nil)
	return ss
}

func shards(group string, from, n int) []storage.ShardID {
	out := make([]storage.ShardID, n)
	for i := range out {
		out[i] = storage.ShardID{Group: group, Index: from + i}
	}
	return out
}

// recv reads one value from ch within d.
func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing within %s", what, d)
	}
	var zero T
	return zero
}

func wantErr(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func testMeta(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	a, b := h.Open(t, ns), h.Open(t, ns)
	ctx := ctxT(t)
	if _, err := a.Meta(ctx); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Meta before EnsureMeta: got %v, want ErrNotFound", err)
	}
	m := storage.ClusterMeta{Shards: 256, Groups: []string{"default", "jobs"}, Hash: "xxhash64-rendezvous"}
	got, err := a.EnsureMeta(ctx, m)
	if err != nil {
		t.Fatalf("EnsureMeta: %v", err)
	}
	if got.Shards != 256 || got.CreatedAt.IsZero() {
		t.Fatalf("EnsureMeta returned %+v", got)
	}
	again, err := b.EnsureMeta(ctx, m)
	if err != nil {
		t.Fatalf("EnsureMeta by a second runner: %v", err)
	}
	if !again.CreatedAt.Equal(got.CreatedAt) {
		t.Fatalf("meta rewritten: created_at %v then %v", got.CreatedAt, again.CreatedAt)
	}
	for _, tc := range []struct {
		field string
		m     storage.ClusterMeta
	}{
		{"shards", storage.ClusterMeta{Shards: 128, Groups: m.Groups, Hash: m.Hash}},
		{"groups", storage.ClusterMeta{Shards: 256, Groups: []string{"default"}, Hash: m.Hash}},
		{"hash", storage.ClusterMeta{Shards: 256, Groups: m.Groups, Hash: "other"}},
	} {
		_, err := b.EnsureMeta(ctx, tc.m)
		var mm *storage.MetaMismatchError
		if !errors.As(err, &mm) || mm.Field != tc.field || !errors.Is(err, storage.ErrMetaMismatch) {
			t.Fatalf("EnsureMeta with different %s: got %v, want *MetaMismatchError{Field: %q}", tc.field, err, tc.field)
		}
	}
	stored, err := b.Meta(ctx)
	if err != nil || stored.Shards != 256 || len(stored.Groups) != 2 {
		t.Fatalf("Meta: %+v, %v", stored, err)
	}
	_, err = a.EnsureMeta(ctx, storage.ClusterMeta{Shards: 0, Groups: []string{"default"}, Hash: "h"})
	wantErr(t, err, storage.ErrInvalid, "EnsureMeta with 0 shards")
}

func testMetaCorrupt(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	s := h.Open(t, ns)
	h.PutRaw(t, ns, "meta", []byte("{not json"))
	_, err := s.EnsureMeta(ctxT(t), storage.ClusterMeta{Shards: 8, Groups: []string{"default"}, Hash: "h"})
	wantErr(t, err, storage.ErrCorrupt, "EnsureMeta over a corrupt record")
	if !strings.Contains(err.Error(), "meta") {
		t.Fatalf("error %q does not name the key", err)
	}
	_, err = s.Meta(ctxT(t))
	wantErr(t, err, storage.ErrCorrupt, "Meta of a corrupt record")
}

func testRegisterAndList(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	a, b := h.Open(t, ns), h.Open(t, ns)
	ra := register(t, a, "runner-a", longTTL)
	want := runner("runner-b")
	want.Weight = 2.5
	want.Groups = []string{"default", "jobs"}
	rb, err := b.Register(ctxT(t), want, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close(context.Background())
	if ra.LeaseID() == 0 || ra.LeaseID() == rb.LeaseID() {
		t.Fatalf("lease ids %x and %x", ra.LeaseID(), rb.LeaseID())
	}
	if ra.TTL() < longTTL {
		t.Fatalf("granted TTL %s < requested %s", ra.TTL(), longTTL)
	}
	list, rev, err := a.Runners(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if rev <= 0 || len(list) != 2 {
		t.Fatalf("Runners: rev %d, %d runners (%+v)", rev, len(list), list)
	}
	byID := map[string]storage.RunnerInfo{}
	for _, r := range list {
		byID[r.ID] = r
	}
	got := byID["runner-b"]
	if got.Weight != 2.5 || len(got.Groups) != 2 || got.Addr != want.Addr || got.Version != "test" || got.StartedAt.IsZero() {
		t.Fatalf("runner-b read back as %+v", got)
	}
	if got.LeaseID != rb.LeaseID() || byID["runner-a"].LeaseID != ra.LeaseID() {
		t.Fatalf("lease ids not reported: %+v", list)
	}
	if ra.RunnerID() != "runner-a" {
		t.Fatalf("RunnerID() = %q", ra.RunnerID())
	}
}

func testDuplicateRunner(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	a, b := h.Open(t, ns), h.Open(t, ns)
	first := register(t, a, "dup", longTTL)
	_, err := b.Register(ctxT(t), runner("dup"), longTTL)
	wantErr(t, err, storage.ErrRunnerExists, "second Register of a live id")
	if !strings.Contains(err.Error(), "runners/dup") {
		t.Fatalf("error %q does not name the key", err)
	}
	if err := first.Close(ctxT(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	again, err := b.Register(ctxT(t), runner("dup"), longTTL)
	if err != nil {
		t.Fatalf("Register after the first closed: %v", err)
	}
	again.Close(context.Background())
}

func testConcurrentRegister(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	const n = 32
	stores := make([]storage.RunnerStore, 4)
	for i := range stores {
		stores[i] = h.Open(t, ns)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss, err := stores[i%len(stores)].Register(ctxT(t), runner("contended"), longTTL)
			if err == nil {
				wins.Add(1)
				t.Cleanup(func() { ss.Close(context.Background()) })
				return
			}
			if !errors.Is(err, storage.ErrRunnerExists) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("unexpected error: %v", err)
	}
	if wins.Load() != 1 {
		t.Fatalf("%d of %d concurrent registrations of one id won, want exactly 1", wins.Load(), n)
	}
}

func testInvalidInput(t *testing.T, h RunnerStoreHarness) {
	s := h.Open(t, h.Namespace(t))
	ctx := ctxT(t)
	for _, r := range []storage.RunnerInfo{
		{ID: ""}, {ID: "a/b", Weight: 1}, {ID: "ok", Weight: -1}, {ID: "ok", Weight: nan()},
		{ID: "ok", Weight: 1, Groups: []string{"bad group"}},
	} {
		if _, err := s.Register(ctx, r, longTTL); !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("Register(%+v): got %v, want ErrInvalid", r, err)
		}
	}
	if _, err := s.Register(ctx, runner("ttl"), 0); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("Register with TTL 0: got %v, want ErrInvalid", err)
	}
	ss := register(t, s, "valid", longTTL)
	res, err := ss.AcquireShards(ctx, []storage.ShardID{{Group: "no/slash", Index: 1}, {Group: "default", Index: -1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != storage.Failed || !errors.Is(r.Err, storage.ErrInvalid) {
			t.Errorf("AcquireShards(%v): %v %v, want failed ErrInvalid", r.Shard, r.Status, r.Err)
		}
	}
	if err := ss.UpdateRunner(ctx, runner("other-id")); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("UpdateRunner changing the id: got %v, want ErrInvalid", err)
	}
}

func nan() float64 { z := 0.0; return z / z }

func testCorruptRunner(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	s := h.Open(t, ns)
	register(t, s, "good", longTTL)
	h.PutRaw(t, ns, "runners/bad", []byte("{\"id\": 12"))
	h.PutRaw(t, ns, "runners/impostor", []byte(`{"id":"good","weight":1}`))
	list, _, err := s.Runners(ctxT(t))
	wantErr(t, err, storage.ErrCorrupt, "Runners with corrupt records")
	if !strings.Contains(err.Error(), "runners/bad") || !strings.Contains(err.Error(), "runners/impostor") {
		t.Fatalf("error %q does not name both keys", err)
	}
	if len(list) != 1 || list[0].ID != "good" {
		t.Fatalf("Runners returned %+v, want just the good one", list)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch := runnerEvents(ctx, s)
	seen := map[string]storage.RunnerEvent{}
	for len(seen) < 3 {
		ev := recv(t, ch, 5*time.Second, "runner watch")
		seen[ev.ID] = ev
	}
	if seen["good"].Err != nil || !errors.Is(seen["bad"].Err, storage.ErrCorrupt) || !errors.Is(seen["impostor"].Err, storage.ErrCorrupt) {
		t.Fatalf("watch events: %+v", seen)
	}
}

func testUpdateRunner(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	s := h.Open(t, ns)
	ss := register(t, s, "upd", longTTL)
	r := runner("upd")
	r.Weight = 0
	if err := ss.UpdateRunner(ctxT(t), r); err != nil {
		t.Fatal(err)
	}
	list, _, err := s.Runners(ctxT(t))
	if err != nil || len(list) != 1 || list[0].Weight != 0 || list[0].LeaseID != ss.LeaseID() {
		t.Fatalf("after UpdateRunner: %+v, %v", list, err)
	}
	h.RevokeLease(t, ss.LeaseID())
	<-ss.Done()
	if err := ss.UpdateRunner(ctxT(t), r); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("UpdateRunner after lease loss: got %v, want ErrLeaseLost", err)
	}
}

func testCloseRevokes(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	s := h.Open(t, ns)
	ss := register(t, s, "closer", longTTL)
	if _, err := ss.AcquireShards(ctxT(t), shards("default", 0, 5)); err != nil {
		t.Fatal(err)
	}
	if err := ss.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ss.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	list, _, _ := s.Runners(ctxT(t))
	locks, _, _ := s.ShardLocks(ctxT(t))
	if len(list) != 0 || len(locks) != 0 {
		t.Fatalf("after Close: %d runners, %d locks remain", len(list), len(locks))
	}
	if err := ss.Close(ctxT(t)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := ss.AcquireShards(ctxT(t), shards("default", 0, 1)); !errors.Is(err, storage.ErrSessionClosed) {
		t.Fatalf("AcquireShards after Close: got %v, want ErrSessionClosed", err)
	}
}

func testConfig(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	a, b := h.Open(t, ns), h.Open(t, ns)
	ctx := ctxT(t)
	v, err := a.Config(ctx)
	if err != nil || v.Value != nil || v.Revision != 0 {
		t.Fatalf("Config when absent: %+v, %v", v, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := b.WatchConfig(wctx)
	rev1, err := a.PutConfig(ctx, []byte(`{"v":1}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutConfig(ctx, []byte(`{"v":"x"}`), 0); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("create over an existing config: got %v, want ErrPrecondition", err)
	}
	rev2, err := b.PutConfig(ctx, []byte(`{"v":2}`), rev1)
	if err != nil || rev2 <= rev1 {
		t.Fatalf("PutConfig at rev %d: %d, %v", rev1, rev2, err)
	}
	if _, err := a.PutConfig(ctx, []byte(`{"v":3}`), rev1); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("PutConfig with a stale revision: got %v, want ErrPrecondition", err)
	}
	got, err := a.Config(ctx)
	if err != nil || string(got.Value) != `{"v":2}` || got.Revision != rev2 {
		t.Fatalf("Config: %q rev %d, %v", got.Value, got.Revision, err)
	}
	var last storage.ConfigEvent
	waitForEvent(t, events, 5*time.Second, "config watch reaching v2", func(ev storage.ConfigEvent) bool {
		last = ev
		return ev.Kind == storage.EventPut && ev.Value.Revision == rev2
	})
	if string(last.Value.Value) != `{"v":2}` {
		t.Fatalf("config event value %q", last.Value.Value)
	}
}

// waitForEvent reads events until match accepts one.
func waitForEvent[T any](t *testing.T, ch <-chan T, within time.Duration, what string, match func(T) bool) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("%s: channel closed", what)
			}
			if match(ev) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: not seen within %s", what, within)
		}
	}
}

func testUnavailableBounded(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	s := h.Open(t, ns)
	ss := register(t, s, "cut", longTTL)
	heal := h.Isolate(t, s)
	defer heal()
	ctx := ctxT(t)
	for name, call := range map[string]func() error{
		"Runners":      func() error { _, _, err := s.Runners(ctx); return err },
		"VerifyShards": func() error { _, err := ss.VerifyShards(ctx, shards("default", 0, 1)); return err },
		"Config":       func() error { _, err := s.Config(ctx); return err },
	} {
		start := time.Now()
		err := call()
		took := time.Since(start)
		if !errors.Is(err, storage.ErrUnavailable) {
			t.Errorf("%s while partitioned: got %v, want ErrUnavailable", name, err)
		}
		if took > 30*time.Second {
			t.Errorf("%s while partitioned took %s: not bounded by the request timeout", name, took)
		}
	}
	res, err := ss.AcquireShards(ctx, shards("default", 0, 2))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != storage.Failed || !errors.Is(r.Err, storage.ErrUnavailable) {
			t.Errorf("AcquireShards while partitioned: %v %v", r.Status, r.Err)
		}
	}
}

func testStoreClose(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	s := h.Open(t, ns)
	ss := register(t, s, "closing", longTTL)
	ch := s.WatchMembership(context.Background())
	recv(t, ch, 5*time.Second, "initial membership listing")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ss.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("session still running after store Close")
	}
	poll.For(t, "watch channel to close", 5*time.Second, func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	})
}
