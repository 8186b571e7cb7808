package s3coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// writeAttempts bounds how often one call re-reads and retries a
// conditional write that lost a race, so that a key rewritten without end
// cannot hold a call past a few request timeouts.
const writeAttempts = 5

// Session is a runner registration: a lease, held in the runner's record
// runners/<id>, and the shard locks bound to it. It implements
// storage.Session: it renews the lease only when asked (KeepAlive).
type Session struct {
	s       *Store
	id      string
	key     string
	lease   int64
	ttl     time.Duration
	granted storage.KeepAliveResult

	// ctx is the session's life: it ends on Orphan, Close, the store's
	// Close (its parent) or a lost lease, with ErrSessionClosed or
	// ErrLeaseLost as its cause.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// mu orders the start of a keep-alive against the session's end, so
	// that once Orphan has waited out inflight no renewal is under way.
	mu       sync.Mutex
	inflight sync.WaitGroup

	// wmu serialises this session's writes of its record.
	wmu       sync.Mutex
	rec       runnerRecord // the version this session last wrote
	etag      string       // its ETag
	confirmed time.Time    // the expiry of the last write known to have landed

	locksMu sync.Mutex
	locks   map[storage.ShardID]heldLock // acquired and not released, for Close

	closeOnce sync.Once
	closeErr  error
}

var _ storage.Session = (*Session)(nil)

// Register writes the runner record under a new lease of ttl: Create when
// the key is free; Replace, If-Match, over a tombstone or a lapsed lease. A
// live lease on the id yields storage.ErrRunnerExists.
func (s *Store) Register(ctx context.Context, r storage.RunnerInfo, ttl time.Duration) (storage.Session, error) {
	const op = "register"
	key := runnerKey(r.ID)
	if err := validateRunner(r); err != nil {
		return nil, s.opError(op, key, err)
	}
	if ttl < time.Second || ttl > 24*time.Hour {
		return nil, s.opError(op, key, fmt.Errorf("%w: lease TTL %s must be within [1s, 24h]", storage.ErrInvalid, ttl))
	}
	if r.StartedAt.IsZero() {
		r.StartedAt = s.opts.now().UTC()
	}
	r.LeaseID = 0
	release, err := s.lockRegistration(ctx, r.ID)
	if err != nil {
		return nil, s.opError(op, key, err)
	}
	defer release()
	lease := rand.Int64N(math.MaxInt64-1) + 1
	// Read first: a registration over a live record is refused without a
	// write, so that runners racing for one id queue no conditional
	// writes on it (a gateway serialises those per key).
	var prevETag string
	var prevRev int64
	if obj, err := s.get(ctx, key); err == nil {
		old, err := decodeRunner(key, obj.Body)
		if err != nil {
			return nil, s.corrupt(key, err)
		}
		st, err := s.serverTime(ctx)
		if err != nil {
			return nil, s.opError(op, key, err)
		}
		if !old.Tombstone && !old.lapsed(st) {
			return nil, runnerExists(s, key, old)
		}
		prevETag, prevRev = obj.ETag, old.Rev
	} else if !errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	for range writeAttempts {
		// The expiry is counted from a clock reading taken after the send
		// time: it is at least the store's time at SentAt plus the TTL.
		sentAt := s.opts.now()
		st, err := s.serverTime(ctx)
		if err != nil {
			return nil, s.opError(op, key, err)
		}
		rec := runnerRecord{Rev: s.nextRev(st, prevRev), Runner: &r, Lease: lease, TTLMillis: ttl.Milliseconds(), Expires: st.Latest().Add(ttl)}
		body, err := json.Marshal(rec)
		if err != nil {
			return nil, s.opError(op, key, err)
		}
		var etag string
		if prevETag == "" {
			etag, err = s.create(ctx, op, key, body)
		} else {
			etag, err = s.replace(ctx, op, key, body, prevETag)
		}
		if err == nil {
			return s.newSession(r, lease, ttl, sentAt, rec, etag), nil
		}
		if !errors.Is(err, storage.ErrPrecondition) {
			return nil, err
		}
		obj, err := s.get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			prevETag, prevRev = "", 0
			continue
		}
		if err != nil {
			return nil, err
		}
		old, err := decodeRunner(key, obj.Body)
		if err != nil {
			return nil, s.corrupt(key, err)
		}
		if old.Lease == lease && !old.Tombstone && old.Renewal == rec.Renewal && old.Expires.Equal(rec.Expires) {
			// Our write landed; a retry of it lost to itself.
			return s.newSession(r, lease, ttl, sentAt, rec, obj.ETag), nil
		}
		if !old.Tombstone && !old.lapsed(st) {
			return nil, runnerExists(s, key, old)
		}
		prevETag, prevRev = obj.ETag, old.Rev
	}
	return nil, s.opError(op, key, fmt.Errorf("%w: the record kept changing under %d attempts; another registration is under way", storage.ErrRunnerExists, writeAttempts))
}

// newSession is the session of a registration whose record (rec, at etag)
// was written.
func (s *Store) newSession(r storage.RunnerInfo, lease int64, ttl time.Duration, sentAt time.Time, rec runnerRecord, etag string) *Session {
	ss := &Session{
		s: s, id: r.ID, key: runnerKey(r.ID), lease: lease, ttl: ttl,
		granted: storage.KeepAliveResult{SentAt: sentAt, AnsweredAt: s.opts.now(), TTL: ttl},
		rec:     rec, etag: etag, confirmed: rec.Expires,
		locks: map[storage.ShardID]heldLock{},
	}
	ss.ctx, ss.cancel = context.WithCancelCause(s.ctx)
	s.members.kickAfterWrite()
	return ss
}

// lockRegistration makes registrations of one id through this store run
// one at a time: concurrent ones would only queue on the key at the
// gateway (which serialises conditional writes per key), and all but one
// must lose anyway; in turn, each finds the winner's record with a read.
func (s *Store) lockRegistration(ctx context.Context, id string) (release func(), err error) {
	for {
		s.regMu.Lock()
		busy, ok := s.registering[id]
		if !ok {
			mine := make(chan struct{})
			s.registering[id] = mine
			s.regMu.Unlock()
			return func() {
				s.regMu.Lock()
				delete(s.registering, id)
				s.regMu.Unlock()
				close(mine)
			}, nil
		}
		s.regMu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// runnerExists is the error of a registration over the live record old.
func runnerExists(s *Store, key string, old runnerRecord) error {
	return s.opError("register", key, fmt.Errorf("%w (held by lease %x, addr %q, started %s; it frees when that lease ends)",
		storage.ErrRunnerExists, old.Lease, old.Runner.Addr, old.Runner.StartedAt.Format(time.RFC3339)))
}

// RunnerID returns the registered runner's id.
func (ss *Session) RunnerID() string { return ss.id }

// LeaseID returns the session's lease.
func (ss *Session) LeaseID() int64 { return ss.lease }

// TTL returns the lease TTL.
func (ss *Session) TTL() time.Duration { return ss.ttl }

// Granted returns the registration's grant: the lease's first confirmation.
func (ss *Session) Granted() storage.KeepAliveResult { return ss.granted }

// Done is closed when the session has ended.
func (ss *Session) Done() <-chan struct{} { return ss.ctx.Done() }

// alive returns why the session can no longer act, or nil.
func (ss *Session) alive() error {
	if ss.ctx.Err() == nil {
		return nil
	}
	if errors.Is(context.Cause(ss.ctx), storage.ErrLeaseLost) {
		return storage.ErrLeaseLost
	}
	return storage.ErrSessionClosed
}

// KeepAlive renews the lease once: it reads the send time, then the
// store's clock, and writes expires = the clock's latest reading + TTL
// with Replace If-Match the version it last wrote. The lease is lost (and
// the session ends) when its last confirmed expiry has certainly passed,
// or when the record turns out to be a tombstone, another lease's, or
// gone. A renewal whose answer was lost is recognised on the re-read by its
// renewal counter.
func (ss *Session) KeepAlive(ctx context.Context) (storage.KeepAliveResult, error) {
	const op = "keepalive"
	ss.mu.Lock()
	if err := ss.alive(); err != nil {
		ss.mu.Unlock()
		return storage.KeepAliveResult{}, ss.s.opError(op, ss.key, err)
	}
	ss.inflight.Add(1)
	ss.mu.Unlock()
	defer ss.inflight.Done()

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(ss.ctx, cancel)() // Orphan cuts the call short
	ss.wmu.Lock()
	defer ss.wmu.Unlock()

	res := storage.KeepAliveResult{SentAt: ss.s.opts.now()}
	fail := func(err error) (storage.KeepAliveResult, error) {
		if ss.ctx.Err() != nil {
			return res, ss.s.opError(op, ss.key, ss.alive())
		}
		return res, ss.s.opError(op, ss.key, err)
	}
	lost := func(why error) (storage.KeepAliveResult, error) {
		res.AnsweredAt = ss.s.opts.now()
		ss.cancel(storage.ErrLeaseLost)
		return res, ss.s.opError(op, ss.key, storage.Wrap(storage.ErrLeaseLost, why))
	}
	st, err := ss.s.serverTime(cctx)
	if err != nil {
		return fail(err)
	}
	etag := ss.etag
	next := ss.rec
	for range writeAttempts {
		if st.Earliest().After(ss.confirmed) {
			return lost(fmt.Errorf("its last confirmed expiry %s has passed (store time at least %s)",
				ss.confirmed.Format(time.RFC3339Nano), st.Earliest().Format(time.RFC3339Nano)))
		}
		next.Renewal++
		next.Rev = ss.s.nextRev(st, next.Rev)
		next.Expires = st.Latest().Add(ss.ttl)
		body, err := json.Marshal(next)
		if err != nil {
			return fail(err)
		}
		newETag, err := ss.s.replace(cctx, op, ss.key, body, etag)
		if err == nil {
			return ss.renewed(res, next, newETag), nil
		}
		if !errors.Is(err, storage.ErrPrecondition) {
			return fail(err)
		}
		obj, err := ss.s.get(cctx, ss.key)
		if errors.Is(err, storage.ErrNotFound) {
			return lost(errors.New("the runner record is gone"))
		}
		if err != nil {
			return fail(err)
		}
		cur, err := decodeRunner(ss.key, obj.Body)
		switch {
		case err != nil:
			return lost(fmt.Errorf("the runner record was overwritten: %w", err))
		case cur.Tombstone:
			return lost(fmt.Errorf("the runner record is a tombstone of lease %x", cur.Lease))
		case cur.Lease != ss.lease:
			return lost(fmt.Errorf("the runner record is bound to lease %x", cur.Lease))
		case cur.Renewal == next.Renewal && cur.Expires.Equal(next.Expires):
			// Our write landed; its answer was lost.
			return ss.renewed(res, next, obj.ETag), nil
		}
		// Ours, at a version we did not confirm (an earlier renewal whose
		// answer was lost): renew on top of it, unless it has lapsed.
		if cur.lapsed(st) {
			return lost(fmt.Errorf("its expiry %s has passed", cur.Expires.Format(time.RFC3339Nano)))
		}
		etag = obj.ETag
		next.Renewal = max(next.Renewal, cur.Renewal)
		next.Rev = max(next.Rev, cur.Rev)
		if st, err = ss.s.serverTime(cctx); err != nil {
			return fail(err)
		}
	}
	return fail(fmt.Errorf("%w: the runner record kept changing under %d attempts", storage.ErrUnavailable, writeAttempts))
}

// renewed records a landed renewal and completes its result.
func (ss *Session) renewed(res storage.KeepAliveResult, rec runnerRecord, etag string) storage.KeepAliveResult {
	ss.rec, ss.etag, ss.confirmed = rec, etag, rec.Expires
	res.AnsweredAt = ss.s.opts.now()
	res.TTL = ss.ttl
	return res
}

// UpdateRunner rewrites the runner record under the session's lease,
// keeping its expiry.
func (ss *Session) UpdateRunner(ctx context.Context, r storage.RunnerInfo) error {
	const op = "update runner"
	if err := ss.alive(); err != nil {
		return ss.s.opError(op, ss.key, err)
	}
	if r.ID != ss.id {
		return ss.s.opError(op, ss.key, fmt.Errorf("%w: runner id %q cannot change to %q", storage.ErrInvalid, ss.id, r.ID))
	}
	if err := validateRunner(r); err != nil {
		return ss.s.opError(op, ss.key, err)
	}
	r.LeaseID = 0
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if r.StartedAt.IsZero() {
		r.StartedAt = ss.rec.Runner.StartedAt
	}
	etag := ss.etag
	next := ss.rec
	next.Runner = &r
	for range writeAttempts {
		st, err := ss.s.serverTime(ctx)
		if err != nil {
			return ss.s.opError(op, ss.key, err)
		}
		if st.Earliest().After(next.Expires) {
			ss.cancel(storage.ErrLeaseLost)
			return ss.s.opError(op, ss.key, fmt.Errorf("%w: the lease's expiry %s has passed", storage.ErrLeaseLost, next.Expires.Format(time.RFC3339Nano)))
		}
		next.Renewal++
		next.Rev = ss.s.nextRev(st, next.Rev)
		body, err := json.Marshal(next)
		if err != nil {
			return ss.s.opError(op, ss.key, err)
		}
		newETag, err := ss.s.replace(ctx, op, ss.key, body, etag)
		if err == nil {
			ss.rec, ss.etag = next, newETag
			ss.s.members.kickAfterWrite()
			return nil
		}
		if !errors.Is(err, storage.ErrPrecondition) {
			return err
		}
		obj, err := ss.s.get(ctx, ss.key)
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		var cur runnerRecord
		if err == nil {
			cur, err = decodeRunner(ss.key, obj.Body)
		}
		if err != nil || cur.Tombstone || cur.Lease != ss.lease {
			ss.cancel(storage.ErrLeaseLost)
			return ss.s.opError(op, ss.key, fmt.Errorf("%w: the runner record is no longer bound to lease %x", storage.ErrLeaseLost, ss.lease))
		}
		etag = obj.ETag
		next.Renewal = max(next.Renewal, cur.Renewal)
		next.Rev = max(next.Rev, cur.Rev)
		next.Expires = cur.Expires
	}
	return ss.s.opError(op, ss.key, fmt.Errorf("%w: the runner record kept changing under %d attempts", storage.ErrUnavailable, writeAttempts))
}

// Orphan ends the session without revoking the lease, and returns once no
// keep-alive is under way.
func (ss *Session) Orphan() {
	ss.mu.Lock()
	ss.cancel(storage.ErrSessionClosed)
	ss.mu.Unlock()
	ss.inflight.Wait()
}

// Close ends the session and revokes the lease: it tombstones the runner
// record (Replace If-Match, as any revoke), which ends the lease and every
// lock bound to it at once for every reader, then frees those locks. It is
// idempotent; a failed revoke is returned (the lease then lapses with its
// TTL).
func (ss *Session) Close(ctx context.Context) error {
	ss.closeOnce.Do(func() {
		ss.Orphan()
		if err := ss.s.revoke(ctx, ss.key, ss.lease); err != nil {
			ss.closeErr = err
			return
		}
		ss.locksMu.Lock()
		held := make([]storage.ShardID, 0, len(ss.locks))
		for sh := range ss.locks {
			held = append(held, sh)
		}
		ss.locksMu.Unlock()
		// Freeing is tidiness, not safety: the tombstone already freed
		// them for any acquirer.
		parallel(len(held), readConcurrency, func(i int) { _ = ss.ReleaseShard(ctx, held[i]) })
		ss.s.members.kickAfterWrite()
	})
	return ss.closeErr
}

// revoke tombstones runners/<id> if it is bound to lease; a record of
// another lease, a tombstone or no record is left alone.
func (s *Store) revoke(ctx context.Context, key string, lease int64) error {
	const op = "revoke lease"
	for range writeAttempts {
		obj, err := s.get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		cur, err := decodeRunner(key, obj.Body)
		if err != nil || cur.Tombstone || cur.Lease != lease {
			return nil
		}
		err = s.tombstone(ctx, op, key, cur, obj.ETag)
		if !errors.Is(err, storage.ErrPrecondition) {
			return err
		}
	}
	return s.opError(op, key, fmt.Errorf("%w: the runner record kept changing under %d attempts", storage.ErrUnavailable, writeAttempts))
}

// tombstone replaces the version etag of a runner record (rec) with a
// tombstone of its lease. Replace, never a conditional delete: a gateway
// whose conditional delete is not atomic against a conditional PUT could
// let a renewal land in between and then remove it, while a Replace is
// exactly as atomic as the renewal's own.
func (s *Store) tombstone(ctx context.Context, op, key string, rec runnerRecord, etag string) error {
	st, err := s.serverTime(ctx)
	if err != nil {
		return s.opError(op, key, err)
	}
	tomb := runnerRecord{Rev: s.nextRev(st, rec.Rev), Lease: rec.Lease, TTLMillis: rec.TTLMillis, Expires: rec.Expires, Renewal: rec.Renewal + 1, Tombstone: true}
	body, err := json.Marshal(tomb)
	if err != nil {
		return s.opError(op, key, err)
	}
	if _, err := s.replace(ctx, op, key, body, etag); err != nil {
		return err
	}
	s.members.kickAfterWrite()
	return nil
}
