package etcd_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

func benchSession(b *testing.B) (*etcd.Store, storage.Session) {
	srv := testenv.SharedEtcd(b)
	s, err := etcd.New(srv.Client(b), etcd.WithPrefix(testenv.Prefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ss, err := s.Register(context.Background(), storage.RunnerInfo{ID: "bench", Weight: 1}, 30*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ss.Close(context.Background()) })
	go storage.KeepAliveLoop(context.Background(), ss, storage.KeepAliveCadence{}, nil)
	return s, ss
}

func group(n, i int) []storage.ShardID {
	out := make([]storage.ShardID, n)
	g := "g" + strconv.Itoa(i)
	for j := range out {
		out[j] = storage.ShardID{Group: g, Index: j}
	}
	return out
}

// BenchmarkAcquire256 acquires 256 free shard locks in one batch.
func BenchmarkAcquire256(b *testing.B) {
	_, ss := benchSession(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		res, err := ss.AcquireShards(ctx, group(256, i))
		if err != nil || res[255].Status != storage.Acquired {
			b.Fatalf("%v %+v", err, res[255])
		}
		i++
	}
}

// BenchmarkVerify256 verifies 256 held shard locks with one read.
func BenchmarkVerify256(b *testing.B) {
	_, ss := benchSession(b)
	ctx := context.Background()
	shards := group(256, 0)
	if _, err := ss.AcquireShards(ctx, shards); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := ss.VerifyShards(ctx, shards)
		if err != nil || !res[255].Owned {
			b.Fatalf("%v %+v", err, res[255])
		}
	}
}
