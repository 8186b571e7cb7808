package s3coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

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
	holders := &holderCache{ends: map[int64]holderEnd{}}
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
// the holder's lease has certainly ended (holderEnd): never while it might
// still renew, nor while it might still act on a renewal it had.
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
			end, err := holders.endLease(ctx, ss.s, l)
			if errors.Is(err, storage.ErrPrecondition) {
				continue // the holder's record changed as we wrote it: look again
			}
			if err != nil {
				return fail(err)
			}
			if !end.takeable(l, st) {
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
	body, _ := json.Marshal(lockRecord{Rev: rev, RunnerID: ss.id, Lease: ss.lease, AcquiredAt: ss.s.opts.now().UTC(), Epoch: epoch,
		TTLMillis: ss.ttl.Milliseconds()})
	return body
}

// holderCache remembers, for one AcquireShards call, what each holder's
// record said of its lease, so that a runner's record is read once per
// call, not once per shard it holds. A lease found live may lapse during
// the call: the next call sees it.
type holderCache struct {
	mu   sync.Mutex
	ends map[int64]holderEnd // by lease
}

func (h *holderCache) endLease(ctx context.Context, s *Store, l lockRecord) (holderEnd, error) {
	h.mu.Lock()
	end, ok := h.ends[l.Lease]
	h.mu.Unlock()
	if ok {
		return end, nil
	}
	end, err := s.endLease(ctx, l.RunnerID, l.Lease, l.holderTTL())
	if err == nil {
		h.mu.Lock()
		h.ends[l.Lease] = end
		h.mu.Unlock()
	}
	return end, err
}

// holderEnd is what a holder's runner record says of a lease.
type holderEnd struct {
	// live: the record is the lease's, unexpired; it may still renew.
	live bool
	// vacantAt, when set, bounds when the lease lost its record without
	// ending (deleted or overwritten behind its back): it can renew no
	// more, but may act on its last renewal until vacantAt plus its TTL.
	vacantAt time.Time
}

// takeable reports whether the lock l may be taken at st: its lease can
// no longer renew, and its holder's deadline has certainly passed when
// the lease lost its record unannounced.
func (e holderEnd) takeable(l lockRecord, st storage.ServerTime) bool {
	if e.live {
		return false
	}
	return e.vacantAt.IsZero() || st.Earliest().After(e.vacantAt.Add(l.holderTTL()))
}

// endLease reads runner id's record and judges the lease it names (of
// TTL ttl, as its lock says):
//
//   - the lease's own record, unexpired: live;
//   - the lease's own record, lapsed: ended, once tombstoned here
//     (Replace If-Match; a renewal that wins gives ErrPrecondition);
//   - the lease's own tombstone (revoked or lapsed): ended;
//   - absent or undecodable: the record went behind the holder's back,
//     which learns of it only at its next renewal and acts until its
//     deadline meanwhile. A fence is written (fence): a tombstone of the
//     lease with VacantAt, and the lease is held until VacantAt + TTL;
//   - a fence of the lease, or a record of another lease: ended, held
//     until the record's VacantAt + TTL when it has one (the lease may
//     have lost its record unannounced before this one was written).
//
// A record of another lease without VacantAt was written over the lease's
// lapsed record or its tombstone (Register writes over nothing else, and
// a Create sets VacantAt), so the lease ended announced.
func (s *Store) endLease(ctx context.Context, id string, lease int64, ttl time.Duration) (holderEnd, error) {
	key := runnerKey(id)
	obj, err := s.get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return s.fence(ctx, key, lease, ttl, "")
	}
	if err != nil {
		return holderEnd{}, err
	}
	rec, err := decodeRunner(key, obj.Body)
	switch {
	case err != nil:
		return s.fence(ctx, key, lease, ttl, obj.ETag)
	case rec.Lease != lease, rec.Fence:
		return holderEnd{vacantAt: rec.VacantAt}, nil
	case rec.Tombstone:
		return holderEnd{}, nil
	}
	st, err := s.serverTime(ctx)
	if err != nil {
		return holderEnd{}, s.opError("acquire", key, err)
	}
	if !rec.lapsed(st) {
		return holderEnd{live: true}, nil
	}
	if err := s.tombstone(ctx, "tombstone lapsed lease", key, rec, obj.ETag); err != nil {
		return holderEnd{}, err
	}
	s.opts.logger.Info("s3coord: tombstoned a lapsed lease", "key", key, "lease", fmt.Sprintf("%x", lease), "expired", rec.Expires)
	return holderEnd{}, nil
}

// fence writes, at key, a tombstone of lease (of TTL ttl) marked Fence,
// with VacantAt the store's latest time read now, and Expires VacantAt +
// ttl, when the holder has certainly stopped: Create when the record was absent
// (etag empty), Replace If-Match the undecodable version etag otherwise,
// so that a registration racing it either lands first (and the write
// gives ErrPrecondition, to look again) or finds the fence.
//
// VacantAt bounds the holder's deadline although it is read before the
// write is decided: the lease's record was already gone when this store
// read it (before the clock), and a renewal is a Replace If-Match of the
// lease's own last version, so none landed after that read; its last one
// landed earlier, and the holder acts until at most its store time +
// TTL. Nor can one land after the fence: it replaces whatever is there.
func (s *Store) fence(ctx context.Context, key string, lease int64, ttl time.Duration, etag string) (holderEnd, error) {
	const op = "fence lease"
	st, err := s.serverTime(ctx)
	if err != nil {
		return holderEnd{}, s.opError(op, key, err)
	}
	tomb := runnerRecord{Rev: s.nextRev(st, 0), Lease: lease, TTLMillis: ttl.Milliseconds(), Expires: st.Latest().Add(ttl),
		Tombstone: true, Fence: true, VacantAt: st.Latest()}
	body, err := json.Marshal(tomb)
	if err != nil {
		return holderEnd{}, s.opError(op, key, err)
	}
	if etag == "" {
		_, err = s.create(ctx, op, key, body)
	} else {
		_, err = s.replace(ctx, op, key, body, etag)
	}
	if err != nil {
		return holderEnd{}, err
	}
	s.members.kickAfterWrite()
	s.opts.logger.Warn("s3coord: a lock holder's runner record was absent or undecodable; its lease is fenced, and its locks are taken once its TTL has run from now",
		"key", key, "lease", fmt.Sprintf("%x", lease), "vacant_at", tomb.VacantAt, "safe_after", tomb.Expires)
	return holderEnd{vacantAt: tomb.VacantAt}, nil
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
	// The version this session wrote is freed without reading it again;
	// if it changed, the write loses and the loop below reads.
	ss.locksMu.Lock()
	held, known := ss.locks[shard]
	ss.locksMu.Unlock()
	if known {
		if changed, err := ss.freeVersion(ctx, shard, held.etag, held.rev, held.epoch); !changed {
			return err
		}
	}
	for range writeAttempts {
		obj, err := ss.s.get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			ss.untrack(shard)
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
			ss.untrack(shard)
			return nil
		}
		if l.Lease != ss.lease {
			ss.untrack(shard)
			return ss.s.opError(op, key, fmt.Errorf("%w (held by %s)", storage.ErrNotOwner, l.RunnerID))
		}
		if changed, err := ss.freeVersion(ctx, shard, obj.ETag, l.Rev, l.Epoch); !changed {
			return err
		}
	}
	return ss.s.opError(op, key, fmt.Errorf("%w: the lock kept changing under %d attempts", storage.ErrUnavailable, writeAttempts))
}

// freeVersion is ReleaseShard's write, for the version it knows (the one
// this session wrote, or the one it read): a Replace If-Match of etag, the
// lock at revision rev, with a free record that keeps epoch, at a revision
// above rev. changed reports that the lock was no longer at that version
// (ErrPrecondition): the caller reads it again. Otherwise err is the
// release's outcome, and a release that landed is no longer tracked.
func (ss *Session) freeVersion(ctx context.Context, shard storage.ShardID, etag string, rev, epoch int64) (changed bool, err error) {
	const op = "release"
	key := shardKey(shard)
	st, err := ss.s.serverTime(ctx)
	if err != nil {
		return false, ss.s.opError(op, key, err)
	}
	body, err := json.Marshal(lockRecord{Rev: ss.s.nextRev(st, rev), Epoch: epoch})
	if err != nil {
		return false, ss.s.opError(op, key, err)
	}
	_, err = ss.s.replace(ctx, op, key, body, etag)
	if errors.Is(err, storage.ErrPrecondition) {
		return true, nil
	}
	if err == nil {
		ss.untrack(shard)
		ss.s.members.kickAfterWrite()
	}
	return false, err
}

// untrack forgets the version of shard's lock this session last wrote,
// once the lock is freed, gone or another's: a later release reads it.
func (ss *Session) untrack(shard storage.ShardID) {
	ss.locksMu.Lock()
	delete(ss.locks, shard)
	ss.locksMu.Unlock()
}
