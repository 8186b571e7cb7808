package etcd_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// TestShardLockHistory: ShardLockHistory returns every put and delete of
// the store's lock keys in revision order, each with the lock it wrote or
// removed (a delete's from its previous value: holder, epoch, lease), and
// nothing of other keys or prefixes. Once etcd has compacted, it reads
// from the compaction revision and says so; a delete whose previous value
// went with the compaction keeps only its shard.
func TestShardLockHistory(t *testing.T) {
	srv := testenv.NewEtcd(t) // of its own: the test compacts it
	direct := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := etcd.New(direct, etcd.WithPrefix(testenv.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := etcd.New(direct, etcd.WithPrefix(testenv.Prefix(t)+"other/"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	sh0 := storage.ShardID{Group: storage.DefaultGroup, Index: 0}
	sh1 := storage.ShardID{Group: storage.DefaultGroup, Index: 1}
	register := func(st *etcd.Store, id string) storage.Session {
		ss, err := st.Register(ctx, storage.RunnerInfo{ID: id, Weight: 1, Groups: []string{storage.DefaultGroup}}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss.Close(context.Background()) })
		return ss
	}
	acquire := func(ss storage.Session, shards ...storage.ShardID) int64 {
		res, err := ss.AcquireShards(ctx, shards)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Status != storage.Acquired {
				t.Fatalf("acquire %s: %+v", r.Shard, r)
			}
		}
		return res[0].Epoch
	}
	r, q := register(s, "r"), register(s, "q")
	e1 := acquire(r, sh0, sh1)
	if err := r.ReleaseShard(ctx, sh0); err != nil {
		t.Fatal(err)
	}
	e2 := acquire(q, sh0)
	acquire(register(other, "x"), sh0) // another prefix: not in s's history

	h, err := s.ShardLockHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Compacted != 0 || h.Revision < e2 {
		t.Fatalf("history compacted %d, complete up to %d; want not compacted, up to at least %d", h.Compacted, h.Revision, e2)
	}
	type ev struct {
		kind   storage.EventKind
		holder string
		epoch  int64
		lease  int64
	}
	check := func(h etcd.LockHistory, sh storage.ShardID, want ...ev) {
		t.Helper()
		got := h.Shards[sh]
		if len(got) != len(want) {
			t.Fatalf("%s: %d events %+v, want %d", sh, len(got), got, len(want))
		}
		for i, g := range got {
			w := want[i]
			if g.Err != nil || g.Kind != w.kind || g.Lock.Shard != sh || g.Lock.RunnerID != w.holder || g.Lock.Epoch != w.epoch || g.Lock.LeaseID != w.lease {
				t.Fatalf("%s event %d: %+v, want %+v", sh, i, g, w)
			}
			if i > 0 && g.Revision <= got[i-1].Revision {
				t.Fatalf("%s: events out of revision order: %+v", sh, got)
			}
		}
	}
	check(h, sh0, ev{storage.EventPut, "r", e1, r.LeaseID()}, ev{storage.EventDelete, "r", e1, r.LeaseID()}, ev{storage.EventPut, "q", e2, q.LeaseID()})
	check(h, sh1, ev{storage.EventPut, "r", e1, r.LeaseID()})
	if len(h.Shards) != 2 {
		t.Fatalf("history of %d shards, want 2: %+v", len(h.Shards), h.Shards)
	}
	if put := h.Shards[sh0][0]; put.Revision != e1 {
		t.Fatalf("the creating put at revision %d, want its epoch %d", put.Revision, e1)
	}

	// Compacted at the release: the puts before it are gone, and so is
	// the released lock's value.
	released := h.Shards[sh0][1].Revision
	if _, err := direct.Compact(ctx, released, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	h, err = s.ShardLockHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Compacted != released {
		t.Fatalf("history compacted at %d, want %d", h.Compacted, released)
	}
	check(h, sh0, ev{storage.EventDelete, "", 0, 0}, ev{storage.EventPut, "q", e2, q.LeaseID()})
	check(h, sh1)
}
