package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/storage"
)

// Session is a runner registration: a lease and the runner record bound to
// it. It implements storage.Session: it renews the lease only when asked
// (KeepAlive), so that the keep-alive cadence is its holder's.
type Session struct {
	s       *Store
	id      string // runner id; immutable
	lease   clientv3.LeaseID
	granted storage.KeepAliveResult

	// ctx is the session's life: it ends on Orphan, Close, the store's
	// Close (its parent) or a lost lease, with ErrSessionClosed or
	// ErrLeaseLost as its cause. Keep-alive calls derive from it.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// mu orders the start of a keep-alive call against the session's end,
	// so that once Orphan has waited out inflight no call is under way or
	// can start.
	mu       sync.Mutex
	inflight sync.WaitGroup

	// ka is the keep-alive stream, reused while healthy (keepalive.go).
	ka keepAliveStream

	closeOnce sync.Once
	closeErr  error
}

var _ storage.Session = (*Session)(nil)

// Register grants a lease of ttl (rounded up to whole seconds, etcd's
// granularity) and writes the runner record under it. A live record with
// the same id yields storage.ErrRunnerExists; the new lease is then revoked.
func (s *Store) Register(ctx context.Context, r storage.RunnerInfo, ttl time.Duration) (storage.Session, error) {
	key := runnerKey(r.ID)
	if err := validateRunner(r); err != nil {
		return nil, s.opError("register", key, ctx, 0, err)
	}
	if ttl < time.Second || ttl > 24*time.Hour {
		return nil, s.opError("register", key, ctx, 0, fmt.Errorf("%w: lease TTL %s must be within [1s, 24h]", storage.ErrInvalid, ttl))
	}
	if r.StartedAt.IsZero() {
		r.StartedAt = time.Now().UTC()
	}
	val, err := json.Marshal(r)
	if err != nil {
		return nil, s.opError("register", key, ctx, 0, err)
	}

	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	sentAt := time.Now()
	grant, err := s.cli.Grant(cctx, int64(math.Ceil(ttl.Seconds())))
	if err != nil {
		return nil, s.opError("grant lease", key, ctx, s.opts.requestTimeout, err)
	}
	answeredAt := time.Now()
	full := s.opts.prefix + key
	resp, err := s.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(full), "=", 0)).
		Then(clientv3.OpPut(full, string(val), clientv3.WithLease(grant.ID))).
		Else(clientv3.OpGet(full)).
		Commit()
	if err != nil || !resp.Succeeded {
		s.revokeQuietly(grant.ID)
	}
	if err != nil {
		return nil, s.opError("register", key, ctx, s.opts.requestTimeout, err)
	}
	if !resp.Succeeded {
		holder := "unknown"
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			holder = fmt.Sprintf("lease %x", kvs[0].Lease)
			if other, err := s.decodeRunner(kvs[0]); err == nil {
				holder = fmt.Sprintf("lease %x, addr %q, started %s", other.LeaseID, other.Addr, other.StartedAt.Format(time.RFC3339))
			}
		}
		return nil, s.opError("register", key, ctx, 0, fmt.Errorf("%w (held by %s; it frees when that lease ends)", storage.ErrRunnerExists, holder))
	}

	granted := time.Duration(grant.TTL) * time.Second
	ss := &Session{
		s:     s,
		id:    r.ID,
		lease: grant.ID,
		// The grant confirms the lease as a keep-alive would: its TTL runs
		// from no earlier than the moment the request left.
		granted: storage.KeepAliveResult{SentAt: sentAt, AnsweredAt: answeredAt, TTL: granted},
	}
	ss.ctx, ss.cancel = context.WithCancelCause(s.ctx)
	return ss, nil
}

func (s *Store) revokeQuietly(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.requestTimeout)
	defer cancel()
	if _, err := s.cli.Revoke(ctx, id); err != nil {
		s.opts.logger.Warn("etcd: revoke lease failed; it expires with its TTL", "lease", fmt.Sprintf("%x", int64(id)), "err", err)
	}
}

// RunnerID returns the registered runner's id.
func (ss *Session) RunnerID() string { return ss.id }

// LeaseID returns the session's lease.
func (ss *Session) LeaseID() int64 { return int64(ss.lease) }

// TTL returns the TTL etcd granted.
func (ss *Session) TTL() time.Duration { return ss.granted.TTL }

// Granted returns the registration's grant: the lease's first confirmation.
func (ss *Session) Granted() storage.KeepAliveResult { return ss.granted }

// Done is closed when the session has ended.
func (ss *Session) Done() <-chan struct{} { return ss.ctx.Done() }

// KeepAlive renews the lease once; see storage.Session. It goes on the
// session's keep-alive stream, reused while healthy (keepalive.go), which
// requires a leader (WithRequireLeader), so that a member cut off from its
// leader fails the call instead of letting it hang until ctx's deadline.
func (ss *Session) KeepAlive(ctx context.Context) (storage.KeepAliveResult, error) {
	key := runnerKey(ss.id)
	ss.mu.Lock()
	if err := ss.alive(); err != nil {
		ss.mu.Unlock()
		return storage.KeepAliveResult{}, ss.s.opError("keepalive", key, nil, 0, err)
	}
	ss.inflight.Add(1)
	ss.mu.Unlock()
	defer ss.inflight.Done()

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(ss.ctx, cancel)() // Orphan cuts the call short
	res := storage.KeepAliveResult{SentAt: time.Now()}
	resp, err := ss.keepAliveOnce(cctx)
	if err == nil || leaseGone(err) {
		res.AnsweredAt = time.Now()
	}
	switch {
	case ss.ctx.Err() != nil:
		return res, ss.s.opError("keepalive", key, nil, 0, ss.alive())
	case err == nil && resp.TTL > 0:
		res.TTL = time.Duration(resp.TTL) * time.Second
		return res, nil
	case err == nil || leaseGone(err):
		if err == nil {
			err = fmt.Errorf("keep-alive answered TTL %d: the lease has expired", resp.TTL)
		}
		ss.cancel(storage.ErrLeaseLost)
		return res, ss.s.opError("keepalive", key, nil, 0, storage.Wrap(storage.ErrLeaseLost, err))
	case errors.Is(ctx.Err(), context.Canceled):
		return res, ss.s.opError("keepalive", key, ctx, 0, err) // the caller gave up
	}
	// A call cut by ctx's deadline is a keep-alive without an answer in
	// time: unavailable, like any other failure to reach the leader.
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		timeout = dl.Sub(res.SentAt).Round(time.Millisecond)
	}
	return res, ss.s.opError("keepalive", key, nil, timeout, err)
}

// alive returns why the session can no longer act, or nil.
func (ss *Session) alive() error {
	if ss.ctx.Err() == nil {
		return nil
	}
	if errors.Is(context.Cause(ss.ctx), storage.ErrLeaseLost) {
		return storage.ErrLeaseLost
	}
	return storage.ErrSessionClosed // Orphan, Close or the store's Close
}

// UpdateRunner rewrites the runner record under the session's lease.
func (ss *Session) UpdateRunner(ctx context.Context, r storage.RunnerInfo) error {
	key := runnerKey(ss.id)
	if err := ss.alive(); err != nil {
		return ss.s.opError("update runner", key, ctx, 0, err)
	}
	if r.ID != ss.id {
		return ss.s.opError("update runner", key, ctx, 0, fmt.Errorf("%w: runner id %q cannot change to %q", storage.ErrInvalid, ss.id, r.ID))
	}
	if err := validateRunner(r); err != nil {
		return ss.s.opError("update runner", key, ctx, 0, err)
	}
	val, err := json.Marshal(r)
	if err != nil {
		return ss.s.opError("update runner", key, ctx, 0, err)
	}
	full := ss.s.opts.prefix + key
	cctx, cancel := ss.s.withTimeout(ctx)
	defer cancel()
	resp, err := ss.s.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.LeaseValue(full), "=", ss.lease)).
		Then(clientv3.OpPut(full, string(val), clientv3.WithLease(ss.lease))).
		Commit()
	if err != nil {
		return ss.s.opError("update runner", key, ctx, ss.s.opts.requestTimeout, err)
	}
	if !resp.Succeeded {
		return ss.s.opError("update runner", key, ctx, 0, fmt.Errorf("%w: the runner record is no longer bound to lease %x", storage.ErrLeaseLost, int64(ss.lease)))
	}
	return nil
}

// Orphan ends the session without revoking the lease, and returns once no
// keep-alive call is under way.
func (ss *Session) Orphan() {
	ss.mu.Lock()
	ss.cancel(storage.ErrSessionClosed)
	ss.mu.Unlock()
	ss.inflight.Wait()
	ss.ka.close()
}

// Close ends the session and revokes the lease. It is idempotent; a failed
// revoke is returned (the lease then expires with its TTL).
func (ss *Session) Close(ctx context.Context) error {
	ss.closeOnce.Do(func() {
		ss.Orphan()
		cctx, cancel := ss.s.withTimeout(ctx)
		defer cancel()
		if _, err := ss.s.cli.Revoke(cctx, ss.lease); err != nil && !leaseGone(err) {
			ss.closeErr = ss.s.opError("revoke lease", runnerKey(ss.id), ctx, ss.s.opts.requestTimeout, err)
		}
	})
	return ss.closeErr
}
