package routing_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/routing"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func sh(i int) storage.ShardID { return storage.ShardID{Group: storage.DefaultGroup, Index: i} }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens a store on endpoint (the server or a proxy) under ns.
func openStore(t *testing.T, endpoint, ns string) *etcd.Store {
	t.Helper()
	st, err := etcd.New(testenv.ClientAt(t, endpoint), etcd.WithPrefix(ns), etcd.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// startTable runs a Table on st until stop (or the test's end), and waits
// for its first listing. stop returns Run's result.
func startTable(t *testing.T, st storage.MembershipReader) (tbl *routing.Table, stop func() error) {
	t.Helper()
	tbl = routing.New(st)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tbl.Run(ctx) }()
	var result error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			result = <-done
		}
		return result
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	if err := tbl.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return tbl, stop
}

// register registers runner id at addr and keeps its lease alive until the
// test ends.
func register(t *testing.T, st storage.Registrar, id, addr string) storage.Session {
	t.Helper()
	ss, err := st.Register(ctxT(t), storage.RunnerInfo{ID: id, CallAddr: addr, Weight: 1, Groups: []string{storage.DefaultGroup}}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	keepAlive(t, ss)
	return ss
}

// keepAlive keeps ss's lease alive until the test ends, then closes it.
func keepAlive(t *testing.T, ss storage.Session) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		storage.KeepAliveLoop(ctx, ss, storage.KeepAliveCadence{}, nil)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		ss.Close(context.Background())
	})
}

// acquire locks shards for ss and returns their epochs.
func acquire(t *testing.T, ss storage.Session, shards ...storage.ShardID) map[storage.ShardID]int64 {
	t.Helper()
	res, err := ss.AcquireShards(ctxT(t), shards)
	if err != nil {
		t.Fatal(err)
	}
	out := map[storage.ShardID]int64{}
	for _, r := range res {
		if r.Status != storage.Acquired {
			t.Fatalf("acquire %s for %s: %s (holder %q, err %v)", r.Shard, ss.RunnerID(), r.Status, r.Holder, r.Err)
		}
		out[r.Shard] = r.Epoch
	}
	return out
}

// owners returns the table's owners of shards [0, n).
func owners(tbl *routing.Table, n int) map[storage.ShardID]routing.Owner {
	out := map[storage.ShardID]routing.Owner{}
	for i := range n {
		if o, ok := tbl.Owner(sh(i)); ok {
			o.Revision = 0 // compared apart
			out[sh(i)] = o
		}
	}
	return out
}

func want(id, addr string, epochs map[storage.ShardID]int64) map[storage.ShardID]routing.Owner {
	out := map[storage.ShardID]routing.Owner{}
	for s, e := range epochs {
		out[s] = routing.Owner{RunnerID: id, Addr: addr, Epoch: e}
	}
	return out
}

func TestOwnersFollowLocks(t *testing.T) {
	testenv.CheckLeaks(t)
	st := openStore(t, testenv.SharedEtcd(t).Endpoint(), testenv.Prefix(t))
	tbl, _ := startTable(t, st)
	if _, ok := tbl.Owner(sh(0)); ok {
		t.Fatal("owner of shard 0 before any lock")
	}
	start := tbl.Revision()

	a := register(t, st, "a", "10.0.0.1:7000")
	epochs := acquire(t, a, sh(0), sh(1), sh(2), sh(3))
	testenv.WaitFor(t, "the four owners", 10*time.Second, func() bool {
		return maps.Equal(owners(tbl, 8), want("a", "10.0.0.1:7000", epochs))
	})
	o, _ := tbl.Owner(sh(0))
	if o.Revision <= start || o.Revision != tbl.Revision() {
		t.Fatalf("owner read at revision %d; table at %d, started at %d", o.Revision, tbl.Revision(), start)
	}

	if err := a.ReleaseShard(ctxT(t), sh(0)); err != nil {
		t.Fatal(err)
	}
	delete(epochs, sh(0))
	testenv.WaitFor(t, "shard 0 released", 10*time.Second, func() bool {
		return maps.Equal(owners(tbl, 8), want("a", "10.0.0.1:7000", epochs))
	})

	if err := a.Close(ctxT(t)); err != nil { // revokes the lease: every lock at once
		t.Fatal(err)
	}
	testenv.WaitFor(t, "no owners after the lease is revoked", 10*time.Second, func() bool {
		return len(owners(tbl, 8)) == 0
	})
}

func TestAwaitOwnerFollowsHandover(t *testing.T) {
	testenv.CheckLeaks(t)
	st := openStore(t, testenv.SharedEtcd(t).Endpoint(), testenv.Prefix(t))
	tbl, _ := startTable(t, st)
	a := register(t, st, "a", "a:1")
	b := register(t, st, "b", "b:1")
	e1 := acquire(t, a, sh(0))[sh(0)]

	got, err := tbl.AwaitOwner(ctxT(t), sh(0), 0)
	if err != nil || got.RunnerID != "a" || got.Epoch != e1 {
		t.Fatalf("AwaitOwner(any): %+v, %v; want a at epoch %d", got, err, e1)
	}

	type result struct {
		o   routing.Owner
		err error
	}
	next := make(chan result, 1)
	go func() {
		o, err := tbl.AwaitOwner(ctxT(t), sh(0), e1)
		next <- result{o, err}
	}()
	if err := a.ReleaseShard(ctxT(t), sh(0)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "shard 0 unheld in the view", 10*time.Second, func() bool {
		_, ok := tbl.Owner(sh(0))
		return !ok
	})
	select {
	case r := <-next:
		t.Fatalf("AwaitOwner returned while the shard had no holder: %+v, %v", r.o, r.err)
	default:
	}

	e2 := acquire(t, b, sh(0))[sh(0)]
	r := <-next
	if r.err != nil || r.o.RunnerID != "b" || r.o.Addr != "b:1" || r.o.Epoch != e2 || e2 <= e1 {
		t.Fatalf("AwaitOwner after the handover: %+v, %v; want b at b:1, epoch %d > %d", r.o, r.err, e2, e1)
	}
}

func TestAwaitOwnerBounded(t *testing.T) {
	testenv.CheckLeaks(t)
	st := openStore(t, testenv.SharedEtcd(t).Endpoint(), testenv.Prefix(t))
	tbl, stop := startTable(t, st)
	a := register(t, st, "a", "a:1")
	e1 := acquire(t, a, sh(0))[sh(0)]
	if _, err := tbl.AwaitOwner(ctxT(t), sh(0), 0); err != nil {
		t.Fatal(err)
	}

	for name, c := range map[string]struct {
		shard    storage.ShardID
		notEpoch int64
	}{
		"no holder":        {sh(1), 0},
		"same holder only": {sh(0), e1},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		began := time.Now()
		o, err := tbl.AwaitOwner(ctx, c.shard, c.notEpoch)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || o != (routing.Owner{}) {
			t.Errorf("%s: AwaitOwner = %+v, %v; want context.DeadlineExceeded", name, o, err)
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("%s: AwaitOwner took %s past a 200ms deadline", name, took)
		}
	}

	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := tbl.AwaitOwner(context.Background(), sh(1), 0); !errors.Is(err, routing.ErrStopped) {
		t.Fatalf("AwaitOwner after Run returned: %v; want ErrStopped", err)
	}
	if o, ok := tbl.Owner(sh(0)); !ok || o.Epoch != e1 {
		t.Fatalf("Owner after Run returned: %+v, %v; want the last view", o, ok)
	}
	if err := tbl.Run(context.Background()); !errors.Is(err, routing.ErrAlreadyRunning) {
		t.Fatalf("second Run: %v; want ErrAlreadyRunning", err)
	}
}

// TestResyncAfterWatchInterruption: a table cut off from etcd while the
// owners change and the history is compacted catches up through a re-list.
func TestResyncAfterWatchInterruption(t *testing.T) {
	testenv.CheckLeaks(t)
	srv := testenv.SharedEtcd(t)
	ns := testenv.Prefix(t)
	u, err := url.Parse(srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewProxy(t, u.Host)
	tbl, _ := startTable(t, openStore(t, "http://"+p.Addr(), ns))
	st := openStore(t, srv.Endpoint(), ns)
	a := register(t, st, "a", "a:1")
	b := register(t, st, "b", "b:1")
	ea := acquire(t, a, sh(0), sh(1))
	testenv.WaitFor(t, "a's owners", 10*time.Second, func() bool {
		return maps.Equal(owners(tbl, 4), want("a", "a:1", ea))
	})
	before := tbl.Revision()

	p.SetMode(testenv.Reset)
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	eb := acquire(t, b, sh(0), sh(1), sh(2))
	cli := srv.Client(t)
	resp, err := cli.Get(ctxT(t), "compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctxT(t), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if got := owners(tbl, 4); !maps.Equal(got, want("a", "a:1", ea)) {
		t.Fatalf("view changed while cut off: %v", got)
	}
	p.SetMode(testenv.Pass)

	testenv.WaitFor(t, "b's owners after the resync", 30*time.Second, func() bool {
		return maps.Equal(owners(tbl, 4), want("b", "b:1", eb))
	})
	if tbl.Revision() < resp.Header.Revision || tbl.Revision() <= before {
		t.Fatalf("revision after resync %d; want ≥ %d (compacted at) and > %d", tbl.Revision(), resp.Header.Revision, before)
	}
}

// TestApplyOrder checks the stream rules on hand-made batches: a listing
// replaces the view, and a batch or listing no newer than it is skipped.
func TestApplyOrder(t *testing.T) {
	tbl := routing.New(nil)
	if err := tbl.Run(context.Background()); !errors.Is(err, routing.ErrNoReader) {
		t.Fatalf("Run without a reader: %v", err)
	}
	select {
	case <-tbl.Ready():
		t.Fatal("ready before any listing")
	default:
	}
	tbl.Apply(listing(10, lockPut(sh(0), "a", 5, 5)))
	<-tbl.Ready()
	mustOwner(t, tbl, sh(0), "a", 5)

	tbl.Apply(events(8, lockDel(sh(0), 8)))                               // older than the view
	tbl.Apply(listing(9))                                                 // overtaken listing
	tbl.Apply(events(12, lockPut(sh(1), "b", 12, 12), lockDel(sh(0), 9))) // second event older
	mustOwner(t, tbl, sh(0), "a", 5)
	mustOwner(t, tbl, sh(1), "b", 12)
	if tbl.Revision() != 12 {
		t.Fatalf("revision %d; want 12", tbl.Revision())
	}

	tbl.Apply(events(13, lockDel(sh(0), 13)), listing(20, lockPut(sh(2), "c", 19, 19)))
	for _, s := range []storage.ShardID{sh(0), sh(1)} {
		if o, ok := tbl.Owner(s); ok {
			t.Fatalf("%s after a listing without it: %+v", s, o)
		}
	}
	mustOwner(t, tbl, sh(2), "c", 19)

	bad := lockPut(sh(2), "", 0, 21)
	bad.Lock.Err = errors.New("garbled")
	tbl.Apply(events(21, bad))
	if o, ok := tbl.Owner(sh(2)); ok {
		t.Fatalf("undecodable lock still routes: %+v", o)
	}
}

func mustOwner(t *testing.T, tbl *routing.Table, s storage.ShardID, id string, epoch int64) {
	t.Helper()
	o, ok := tbl.Owner(s)
	if !ok || o.RunnerID != id || o.Epoch != epoch || o.Addr != id+":1" {
		t.Fatalf("owner of %s: %+v, %v; want %s at epoch %d", s, o, ok, id, epoch)
	}
}

// runnerOf is the runner put that explains a lock of id.
func runnerOf(id string, rev int64) storage.MembershipEvent {
	return storage.MembershipEvent{Runner: &storage.RunnerEvent{Kind: storage.EventPut, ID: id, Runner: storage.RunnerInfo{ID: id, CallAddr: id + ":1"}, Revision: rev}}
}

func lockPut(s storage.ShardID, id string, epoch, rev int64) storage.MembershipEvent {
	return storage.MembershipEvent{Lock: &storage.LockEvent{Kind: storage.EventPut, Shard: s, Lock: storage.ShardLock{Shard: s, RunnerID: id, Epoch: epoch}, Revision: rev}}
}

func lockDel(s storage.ShardID, rev int64) storage.MembershipEvent {
	return storage.MembershipEvent{Lock: &storage.LockEvent{Kind: storage.EventDelete, Shard: s, Revision: rev}}
}

// withRunners puts, before the locks, the runner records that explain them.
func withRunners(evs []storage.MembershipEvent) []storage.MembershipEvent {
	var out []storage.MembershipEvent
	seen := map[string]bool{}
	for _, ev := range evs {
		if ev.Lock != nil && ev.Lock.Kind == storage.EventPut && ev.Lock.Err == nil && !seen[ev.Lock.Lock.RunnerID] {
			seen[ev.Lock.Lock.RunnerID] = true
			out = append(out, runnerOf(ev.Lock.Lock.RunnerID, ev.Lock.Revision))
		}
	}
	return append(out, evs...)
}

func listing(rev int64, evs ...storage.MembershipEvent) storage.MembershipBatch {
	return storage.MembershipBatch{Revision: rev, Listing: true, Events: withRunners(evs)}
}

func events(rev int64, evs ...storage.MembershipEvent) storage.MembershipBatch {
	return storage.MembershipBatch{Revision: rev, Events: withRunners(evs)}
}

// bigListing is a view of n shards held by 3 runners.
func bigListing(n int) storage.MembershipBatch {
	evs := make([]storage.MembershipEvent, 0, n)
	for i := range n {
		evs = append(evs, lockPut(sh(i), fmt.Sprintf("r%d", i%3), int64(i+1), int64(i+1)))
	}
	return listing(int64(n), evs...)
}

const benchShards = 16384

// BenchmarkOwner is the per-call cost of finding a shard's owner, with as
// many readers as GOMAXPROCS.
func BenchmarkOwner(b *testing.B) {
	tbl := routing.New(nil)
	tbl.Apply(bigListing(benchShards))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := tbl.Owner(sh(i % benchShards)); !ok {
				b.Fatal("no owner")
			}
			i += 7
		}
	})
}

// BenchmarkApplyBatch is the writer's cost on a view of 16k shards: an
// acquire transaction's batch (64 locks), a full listing, and, for
// comparison, what a copy-on-write snapshot would add to every batch (a
// clone of the view).
func BenchmarkApplyBatch(b *testing.B) {
	b.Run("64-locks", func(b *testing.B) {
		tbl := routing.New(nil)
		tbl.Apply(bigListing(benchShards))
		rev := int64(benchShards)
		b.ResetTimer()
		for i := range b.N {
			evs := make([]storage.MembershipEvent, 64)
			for j := range evs {
				rev++
				evs[j] = lockPut(sh((i*64+j)%benchShards), "r9", rev, rev)
			}
			tbl.Apply(events(rev, evs...))
		}
	})
	b.Run("listing-16k", func(b *testing.B) {
		tbl := routing.New(nil)
		l := bigListing(benchShards)
		b.ResetTimer()
		for i := range b.N {
			l.Revision = int64(benchShards + i + 1)
			tbl.Apply(l)
		}
	})
	b.Run("clone-16k-view", func(b *testing.B) {
		view := map[storage.ShardID]storage.ShardLock{}
		for i := range benchShards {
			view[sh(i)] = storage.ShardLock{Shard: sh(i), RunnerID: "r", Epoch: int64(i)}
		}
		b.ResetTimer()
		for range b.N {
			_ = maps.Clone(view)
		}
	})
}
