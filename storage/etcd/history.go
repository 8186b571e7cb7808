package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/storage"
)

// LockRevision is one event of a shard lock's key in etcd's own history.
type LockRevision struct {
	// Kind is storage.EventPut (the lock taken) or storage.EventDelete
	// (released, or gone with its lease).
	Kind storage.EventKind
	// Revision is the event's revision: a put's is the lock's mod
	// revision (for the put that created it, its epoch), a delete's the
	// revision at which the lock ended.
	Revision int64
	// Lock is the lock the put wrote, or the one the delete removed (its
	// previous value, which etcd keeps with the event): holder, epoch (the
	// create revision) and lease. On a delete whose previous value etcd
	// no longer has, only Shard is set.
	Lock storage.ShardLock
	// Err is why the value could not be decoded (Lock then holds what
	// could be read).
	Err error
}

// LockHistory is etcd's record of every change of the shard locks, read
// by Store.ShardLockHistory.
type LockHistory struct {
	// Revision is the revision the history is complete up to: it holds
	// every change of shards/ at or below it.
	Revision int64
	// Compacted is the revision etcd's history began at when read, if it
	// had been compacted (0 if not): changes below it are missing, so a
	// lock created before it may be absent or lack its creation.
	Compacted int64
	// Shards holds each shard's events in revision order.
	Shards map[storage.ShardID][]LockRevision
}

// historyProgressEvery is how often ShardLockHistory asks etcd whether
// its watch has caught up: etcd answers only once every watch of the
// stream is synced, so the asking repeats until one answer comes.
const historyProgressEvery = 50 * time.Millisecond

// ShardLockHistory reads etcd's MVCC history of shards/: every put and
// delete of a lock key from the oldest revision etcd keeps up to its
// current one, each with the lock it wrote or removed. It is an audit's
// read (the integration soak judges executions against it), not a
// runtime one: it streams the whole history, so its cost grows with the
// cluster's age, and it is bounded by ctx alone, not by the store's
// request timeout.
//
// It watches from revision 1 (or, when etcd has compacted, from the
// compaction revision, which LockHistory.Compacted then records) and stops
// at the first progress notification at or past the revision current when
// it began: etcd sends one only when the watch has caught up, so every
// event up to that revision has been delivered before it.
func (s *Store) ShardLockHistory(ctx context.Context) (LockHistory, error) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	key := s.opts.prefix + shardsPrefix
	resp, err := s.cli.Get(ctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return LockHistory{}, s.opError("lock history", shardsPrefix, ctx, 0, err)
	}
	h := LockHistory{Revision: resp.Header.Revision, Shards: map[storage.ShardID][]LockRevision{}}
	for from := int64(1); ; {
		compacted, err := s.readLockHistory(ctx, key, from, &h)
		if err != nil {
			return LockHistory{}, s.opError("lock history", shardsPrefix, ctx, 0, err)
		}
		if compacted == 0 {
			return h, nil
		}
		// What was read below the compaction is kept; the rest is read
		// again from where etcd's history now begins.
		h.Compacted, from = compacted, compacted
		for sh, evs := range h.Shards {
			n := 0
			for n < len(evs) && evs[n].Revision < compacted {
				n++
			}
			h.Shards[sh] = evs[:n]
		}
	}
}

// readLockHistory adds to h the events of key's prefix from revision from
// until a progress notification at or past h.Revision, which it then
// records. It returns etcd's compaction revision if from was below it.
func (s *Store) readLockHistory(ctx context.Context, key string, from int64, h *LockHistory) (compacted int64, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := s.cli.Watch(wctx, key, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(from))
	ask := time.NewTicker(historyProgressEvery)
	defer ask.Stop()
	for {
		select {
		case <-ask.C:
			// A request etcd drops while the watch catches up; the next
			// tick asks again. Its error is the stream's, which the watch
			// channel reports too.
			_ = s.cli.RequestProgress(wctx)
			continue
		case resp, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return 0, ctx.Err()
				}
				return 0, errors.New("the watch ended before catching up")
			}
			if resp.CompactRevision > 0 {
				return resp.CompactRevision, nil
			}
			if err := resp.Err(); err != nil {
				if errors.Is(err, rpctypes.ErrCompacted) {
					return 0, fmt.Errorf("history compacted, no compaction revision given: %w", err)
				}
				return 0, err
			}
			for _, ev := range resp.Events {
				r := s.lockRevision(ev)
				h.Shards[r.Lock.Shard] = append(h.Shards[r.Lock.Shard], r)
			}
			if resp.IsProgressNotify() && resp.Header.Revision >= h.Revision {
				h.Revision = resp.Header.Revision
				return 0, nil
			}
		}
	}
}

// lockRevision decodes one event of etcd's history of shards/.
func (s *Store) lockRevision(ev *clientv3.Event) LockRevision {
	r := LockRevision{Kind: storage.EventPut, Revision: ev.Kv.ModRevision}
	if ev.Type != clientv3.EventTypeDelete {
		r.Lock, r.Err = s.decodeLock(ev.Kv)
		return r
	}
	r.Kind = storage.EventDelete
	if ev.PrevKv != nil {
		r.Lock, r.Err = s.decodeLock(ev.PrevKv)
		return r
	}
	rel := s.rel(ev.Kv.Key)
	shard, err := parseShardKey(rel)
	if err != nil {
		r.Err = s.corrupt(rel, err)
	}
	r.Lock.Shard = shard
	return r
}
