package s3coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/tenurehq/tenure/storage"
)

// acquireConcurrency bounds the shards one AcquireShards works on at once:
// each costs two or three requests in a row, and a runner acquiring its
// share of a cluster must not swamp the gateway that every runner's
// renewals go through.
const acquireConcurrency = 4

// AcquireShards tries to lock every shard for the session's lease, each
// shard on its own (conditional writes hold one object), with at most
// acquireConcurrency shards in flight.
func (ss *Session) AcquireShards(ctx context.Context, shards []storage.ShardID) ([]storage.AcquireResult, error) {
	if err := ss.alive(); err != nil {
		return nil, ss.s.opError("acquire", shardsPrefix, err)
	}
	results := make([]storage.AcquireResult, len(shards))
	first := map[storage.ShardID]int{}
	var todo []int
	for i, sh := range shards {
		results[i].Shard = sh
		if err := validateShard(sh); err != nil {
			results[i].Status, results[i].Err = storage.Failed, ss.s.opError("acquire", shardKey(sh), err)
			continue
		}
		if _, dup := first[sh]; dup {
			continue
		}
		first[sh] = i
		todo = append(todo, i)
	}
	// The shards' first writes carry consecutive revisions in the order
	// asked, so that watchers see the acquisitions in that order, as one
	// etcd transaction would show them, though they run in parallel.
	st, err := ss.s.serverTime(ctx)
	if err != nil {
		for _, i := range todo {
			results[i].Status, results[i].Err = storage.Failed, ss.s.opError("acquire", shardKey(results[i].Shard), err)
		}
		return results, nil
	}
	base := ss.s.reserveRevs(st, len(todo))
	holders := &holderCache{ended: map[int64]bool{}}
	// Each session starts at its own place in the list (its lease is
	// random), so that runners acquiring the same shards at once contend
	// for different keys instead of queueing on each key in turn.
	start := int(uint64(ss.lease) % uint64(max(len(todo), 1)))
	parallel(len(todo), acquireConcurrency, func(k int) {
		n := (start + k) % len(todo)
		i := todo[n]
		results[i] = ss.acquireOne(ctx, results[i].Shard, base+int64(n), holders)
	})
	for i, sh := range shards {
		if j, ok := first[sh]; ok && j != i {
			results[i] = results[j]
		}
	}
	ss.s.members.kickAfterWrite()
	return results, nil
}

// acquireOne takes one shard's lock: Create when absent (its epoch starts
// at the write's revision), Replace If-Match when free (epoch + 1), or when
// the holder's lease has ended: once that lease's record is a tombstone,
// absent or bound to another lease, never while it might still renew.
//
// rev is the revision of the first write; a retry takes a fresh one.
func (ss *Session) acquireOne(ctx context.Context, sh storage.ShardID, rev int64, holders *holderCache) storage.AcquireResult {
	const op = "acquire"
	key := shardKey(sh)
	fail := func(err error) storage.AcquireResult {
		return storage.AcquireResult{Shard: sh, Status: storage.Failed, Err: ss.s.opError(op, key, err)}
	}
	acquired := func(epoch, rev int64, etag string) storage.AcquireResult {
		ss.locksMu.Lock()
		ss.locks[sh] = heldLock{etag: etag, epoch: epoch, rev: rev}
		ss.locksMu.Unlock()
		return storage.AcquireResult{Shard: sh, Status: storage.Acquired, Epoch: epoch}
	}
	// A write that got no answer may have landed: it is resolved, once,
	// by reading the lock again (ours, or still free to take), as a lost
	// race is.
	lostAnswer := false
	reread := func(err error) bool {
		if lostAnswer || !errors.Is(err, storage.ErrUnavailable) || ctx.Err() != nil {
			return false
		}
		lostAnswer = true
		return true
	}
	for attempt := range writeAttempts {
		if err := ss.alive(); err != nil {
			return fail(err) // a session that ended takes no lock
		}
		st, err := ss.s.serverTime(ctx)
		if err != nil {
			return fail(err)
		}
		if attempt > 0 {
			rev = ss.s.nextRev(st, 0)
		}
		// A lock a poll of this store saw free is taken without reading
		// it again (a handoff's latency): the write's If-Match makes a
		// stale view lose, and the retry reads.
		obj, err, cached := storage.Object{}, error(nil), false
		if attempt == 0 {
			obj, cached = ss.s.cachedFree(key)
		}
		if !cached {
			obj, err = ss.s.get(ctx, key)
		}
		if errors.Is(err, storage.ErrNotFound) {
			// A lock created anew starts its epoch at the write's revision,
			// not at 1: above every epoch an earlier object at this key
			// had, should it have been deleted.
			etag, err := ss.s.create(ctx, op, key, ss.lockBody(rev, rev))
			switch {
			case err == nil:
				return acquired(rev, rev, etag)
			case errors.Is(err, storage.ErrPrecondition), reread(err):
				continue
			}
			return fail(err)
		}
		if err != nil {
			return fail(err)
		}
		l, err := decodeLock(obj.Body)
		if err != nil {
			return fail(storage.Wrap(storage.ErrCorrupt, err))
		}
		switch {
		case l.Lease == ss.lease:
			return acquired(l.Epoch, l.Rev, obj.ETag)
		case !l.free():
			ended, err := holders.endLease(ctx, ss.s, l.RunnerID, l.Lease)
			if errors.Is(err, storage.ErrPrecondition) {
				continue // the holder renewed as we tombstoned: look again
			}
			if err != nil {
				return fail(err)
			}
			if !ended {
				return storage.AcquireResult{Shard: sh, Status: storage.Held, Holder: l.RunnerID}
			}
		}
		epoch := l.Epoch + 1
		if rev <= l.Rev {
			rev = ss.s.nextRev(st, l.Rev)
		}
		etag, err := ss.s.replace(ctx, op, key, ss.lockBody(rev, epoch), obj.ETag)
		switch {
		case err == nil:
			return acquired(epoch, rev, etag)
		case errors.Is(err, storage.ErrPrecondition), reread(err):
			continue
		}
		return fail(err)
	}
	return fail(fmt.Errorf("%w: the lock kept changing under %d attempts", storage.ErrUnavailable, writeAttempts))
}

// heldLock is the version of a lock this session last wrote.
type heldLock struct {
	etag  string
	epoch int64
	rev   int64
}

// cachedFree returns the lock at key as this store's last read saw it, if
// that read found it free.
func (s *Store) cachedFree(key string) (storage.Object, bool) {
	s.cacheMu.Lock()
	c, ok := s.cache[key]
	s.cacheMu.Unlock()
	if !ok {
		return storage.Object{}, false
	}
	l, err := decodeLock(c.body)
	if err != nil || !l.free() {
		return storage.Object{}, false
	}
	return storage.Object{ObjectInfo: storage.ObjectInfo{Key: key, ETag: c.etag}, Body: c.body}, true
}

func (ss *Session) lockBody(rev, epoch int64) []byte {
	body, _ := json.Marshal(lockRecord{Rev: rev, RunnerID: ss.id, Lease: ss.lease, AcquiredAt: ss.s.opts.now().UTC(), Epoch: epoch})
	return body
}

// holderCache remembers, for one AcquireShards call, which holders' leases
// were found live or ended, so that a runner's record is read once per
// call, not once per shard it holds. A lease found live may lapse during
// the call: the next call sees it.
type holderCache struct {
	mu    sync.Mutex
	ended map[int64]bool // lease → ended
}

func (h *holderCache) endLease(ctx context.Context, s *Store, id string, lease int64) (bool, error) {
	h.mu.Lock()
	ended, ok := h.ended[lease]
	h.mu.Unlock()
	if ok {
		return ended, nil
	}
	ended, err := s.endLease(ctx, id, lease)
	if err == nil {
		h.mu.Lock()
		h.ended[lease] = ended
		h.mu.Unlock()
	}
	return ended, err
}

// endLease reports whether the lease of runner id has ended: its record is
// a tombstone, absent, undecodable (its holder cannot renew it either) or
// bound to another lease. A lease that has certainly lapsed is ended here
// by tombstoning its record (Replace If-Match); a renewal that wins that
// race gives ErrPrecondition. A live lease is not ended.
func (s *Store) endLease(ctx context.Context, id string, lease int64) (bool, error) {
	key := runnerKey(id)
	obj, err := s.get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	rec, err := decodeRunner(key, obj.Body)
	if err != nil || rec.Tombstone || rec.Lease != lease {
		return true, nil
	}
	st, err := s.serverTime(ctx)
	if err != nil {
		return false, s.opError("acquire", key, err)
	}
	if !rec.lapsed(st) {
		return false, nil
	}
	if err := s.tombstone(ctx, "tombstone lapsed lease", key, rec, obj.ETag); err != nil {
		return false, err
	}
	s.opts.logger.Info("s3coord: tombstoned a lapsed lease", "key", key, "lease", fmt.Sprintf("%x", lease), "expired", rec.Expires)
	return true, nil
}

// VerifyShards reads each shard's lock (at most readConcurrency at once)
// and reports which are bound to this session's lease.
func (ss *Session) VerifyShards(ctx context.Context, shards []storage.ShardID) ([]storage.VerifyResult, error) {
	if err := ss.alive(); err != nil {
		return nil, ss.s.opError("verify", shardsPrefix, err)
	}
	out := make([]storage.VerifyResult, len(shards))
	errs := make([]error, len(shards))
	parallel(len(shards), readConcurrency, func(i int) {
		sh := shards[i]
		out[i].Shard = sh
		if validateShard(sh) != nil {
			return
		}
		obj, err := ss.s.get(ctx, shardKey(sh))
		if errors.Is(err, storage.ErrNotFound) {
			return
		}
		if err != nil {
			errs[i] = err
			return
		}
		l, err := decodeLock(obj.Body)
		switch {
		case err != nil, l.free():
		case l.Lease == ss.lease:
			out[i].Owned, out[i].Epoch = true, l.Epoch
		default:
			out[i].Holder = l.RunnerID
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, ss.s.opError("verify", shardsPrefix, err)
	}
	return out, nil
}

// ReleaseShard frees the shard's lock if this session's lease holds it: a
// Replace If-Match with a free body that keeps the epoch, so that the next
// holder's is greater. A lock held by another lease yields
// storage.ErrNotOwner; a free or missing one, nil.
func (ss *Session) ReleaseShard(ctx context.Context, shard storage.ShardID) error {
	const op = "release"
	key := shardKey(shard)
	if err := validateShard(shard); err != nil {
		return ss.s.opError(op, key, err)
	}
	untrack := func() {
		ss.locksMu.Lock()
		delete(ss.locks, shard)
		ss.locksMu.Unlock()
	}
	// The version this session wrote is freed without reading it again;
	// if it changed, the write loses and the loop below reads.
	ss.locksMu.Lock()
	held, known := ss.locks[shard]
	ss.locksMu.Unlock()
	if known {
		st, err := ss.s.serverTime(ctx)
		if err != nil {
			return ss.s.opError(op, key, err)
		}
		body, err := json.Marshal(lockRecord{Rev: ss.s.nextRev(st, held.rev), Epoch: held.epoch})
		if err != nil {
			return ss.s.opError(op, key, err)
		}
		_, err = ss.s.replace(ctx, op, key, body, held.etag)
		if err == nil {
			untrack()
			ss.s.members.kickAfterWrite()
			return nil
		}
		if !errors.Is(err, storage.ErrPrecondition) {
			return err
		}
	}
	for range writeAttempts {
		obj, err := ss.s.get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			untrack()
			return nil
		}
		if err != nil {
			return err
		}
		l, err := decodeLock(obj.Body)
		if err != nil {
			return ss.s.corrupt(key, err)
		}
		if l.free() {
			untrack()
			return nil
		}
		if l.Lease != ss.lease {
			untrack()
			return ss.s.opError(op, key, fmt.Errorf("%w (held by %s)", storage.ErrNotOwner, l.RunnerID))
		}
		st, err := ss.s.serverTime(ctx)
		if err != nil {
			return ss.s.opError(op, key, err)
		}
		body, err := json.Marshal(lockRecord{Rev: ss.s.nextRev(st, l.Rev), Epoch: l.Epoch})
		if err != nil {
			return ss.s.opError(op, key, err)
		}
		_, err = ss.s.replace(ctx, op, key, body, obj.ETag)
		if err == nil {
			untrack()
			ss.s.members.kickAfterWrite()
			return nil
		}
		if !errors.Is(err, storage.ErrPrecondition) {
			return err
		}
	}
	return ss.s.opError(op, key, fmt.Errorf("%w: the lock kept changing under %d attempts", storage.ErrUnavailable, writeAttempts))
}
