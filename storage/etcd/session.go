package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/storage"
)

// Session is a runner registration: a lease, the runner record bound to it,
// and the keep-alive loop that extends it. It implements storage.Session.
type Session struct {
	s        *Store
	id       string // runner id; immutable
	lease    clientv3.LeaseID
	ttl      time.Duration
	interval time.Duration // between confirmed keep-alives
	timeout  time.Duration // per keep-alive call

	ctx    context.Context // the keep-alive loop's lifetime
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	last  storage.LeaseHealth
	subs  map[*healthSub]struct{}
	ended error // nil while the loop runs; ErrLeaseLost or ErrSessionClosed after

	closeOnce sync.Once
	closeErr  error
}

type healthSub struct {
	ch   chan storage.LeaseHealth
	stop func() bool // unregisters the context.AfterFunc
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
		s:        s,
		id:       r.ID,
		lease:    grant.ID,
		ttl:      granted,
		interval: s.opts.keepAliveInterval,
		timeout:  s.opts.keepAliveTimeout,
		done:     make(chan struct{}),
		subs:     map[*healthSub]struct{}{},
	}
	if ss.interval == 0 {
		ss.interval = granted / 3
	}
	if ss.timeout == 0 {
		ss.timeout = max(granted/6, 200*time.Millisecond)
	}
	// The grant confirms the lease as a keep-alive would: its TTL runs from
	// no earlier than the moment the request left.
	ss.last = storage.LeaseHealth{LeaseID: int64(grant.ID), OK: true, SentAt: sentAt, TTL: granted, Deadline: sentAt.Add(granted)}
	ss.ctx, ss.cancel = context.WithCancel(s.ctx)
	s.wg.Add(1)
	go ss.keepAlive(sentAt)
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
func (ss *Session) TTL() time.Duration { return ss.ttl }

// Done is closed when the keep-alive loop has ended.
func (ss *Session) Done() <-chan struct{} { return ss.done }

// LastHealth returns the latest keep-alive observation.
func (ss *Session) LastHealth() storage.LeaseHealth {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.last
}

// Health subscribes to keep-alive observations; see storage.Session.
func (ss *Session) Health(ctx context.Context) <-chan storage.LeaseHealth {
	ch := make(chan storage.LeaseHealth, 1)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ch <- ss.last
	if ss.ended != nil {
		close(ch)
		return ch
	}
	sub := &healthSub{ch: ch}
	ss.subs[sub] = struct{}{}
	sub.stop = context.AfterFunc(ctx, func() {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if _, ok := ss.subs[sub]; ok {
			delete(ss.subs, sub)
			close(ch)
		}
	})
	return ch
}

// keepAlive confirms the lease every interval (counted from the previous
// send), retrying sooner with backoff after a failure so that one lost
// response does not use up the detach margin.
func (ss *Session) keepAlive(lastSent time.Time) {
	defer ss.s.wg.Done()
	backoff := ss.s.opts.retryBackoff
	timer := time.NewTimer(time.Until(lastSent.Add(ss.interval)))
	defer timer.Stop()
	for {
		select {
		case <-ss.ctx.Done():
			ss.end(storage.ErrSessionClosed)
			return
		case <-timer.C:
		}
		sentAt := time.Now()
		cctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ss.ctx), ss.timeout)
		resp, err := ss.keepAliveOnce(cctx)
		cancel()
		if ss.ctx.Err() != nil {
			ss.end(storage.ErrSessionClosed)
			return
		}
		var wait time.Duration
		switch {
		case err == nil && resp.TTL > 0:
			ss.publish(func(h *storage.LeaseHealth) {
				ttl := time.Duration(resp.TTL) * time.Second
				h.OK, h.Err, h.Streak, h.SentAt, h.TTL = true, nil, 0, sentAt, ttl
				if d := sentAt.Add(ttl); d.After(h.Deadline) {
					h.Deadline = d
				}
			})
			backoff = ss.s.opts.retryBackoff
			wait = time.Until(sentAt.Add(ss.interval))
		case err == nil || leaseGone(err):
			if err == nil {
				err = fmt.Errorf("keep-alive answered TTL %d: the lease has expired", resp.TTL)
			}
			lost := ss.s.opError("keepalive", runnerKey(ss.id), nil, ss.timeout, storage.Wrap(storage.ErrLeaseLost, err))
			ss.publish(func(h *storage.LeaseHealth) {
				h.OK, h.Err, h.LeaseLost, h.SentAt = false, lost, true, sentAt
				h.Streak++
				h.Failures++
			})
			ss.end(storage.ErrLeaseLost)
			return
		default:
			ferr := ss.s.opError("keepalive", runnerKey(ss.id), nil, ss.timeout, err)
			ss.publish(func(h *storage.LeaseHealth) {
				h.OK, h.Err, h.SentAt = false, ferr, sentAt
				h.Streak++
				h.Failures++
			})
			ss.s.opts.logger.Debug("etcd: keep-alive failed", "lease", fmt.Sprintf("%x", int64(ss.lease)), "retry_in", backoff, "err", err)
			wait = backoff
			backoff = min(2*backoff, ss.interval)
		}
		timer.Reset(max(wait, 0))
	}
}

// keepAliveOnce renews the lease once on its own stream. clientv3's
// KeepAliveOnce reports a stream the server has already ended (no leader,
// say) as a bare EOF from Send; the status it ended with is what Recv
// returns, so read that.
func (ss *Session) keepAliveOnce(ctx context.Context) (*pb.LeaseKeepAliveResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pb.NewLeaseClient(ss.s.cli.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		return nil, rpctypes.Error(err)
	}
	defer stream.CloseSend()
	if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(ss.lease)}); err != nil {
		if _, rerr := stream.Recv(); rerr != nil {
			err = rerr
		}
		return nil, rpctypes.Error(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, rpctypes.Error(err)
	}
	return resp, nil
}

// publish updates the latest observation and hands it to every subscriber,
// replacing any observation they have not read yet.
func (ss *Session) publish(update func(*storage.LeaseHealth)) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	update(&ss.last)
	for sub := range ss.subs {
		select {
		case <-sub.ch:
		default:
		}
		sub.ch <- ss.last
	}
}

// end records why the session ended and releases its subscribers.
func (ss *Session) end(why error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended != nil {
		return
	}
	ss.ended = why
	for sub := range ss.subs {
		sub.stop()
		close(sub.ch)
	}
	clear(ss.subs)
	close(ss.done)
}

// alive returns why the session can no longer act, or nil.
func (ss *Session) alive() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.ended
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

// Orphan stops the keep-alive loop without revoking the lease.
func (ss *Session) Orphan() {
	ss.cancel()
	<-ss.done
}

// Close stops the keep-alive loop and revokes the lease. It is idempotent;
// a failed revoke is returned (the lease then expires with its TTL).
func (ss *Session) Close(ctx context.Context) error {
	ss.closeOnce.Do(func() {
		ss.cancel()
		<-ss.done
		cctx, cancel := ss.s.withTimeout(ctx)
		defer cancel()
		if _, err := ss.s.cli.Revoke(cctx, ss.lease); err != nil && !leaseGone(err) {
			ss.closeErr = ss.s.opError("revoke lease", runnerKey(ss.id), ctx, ss.s.opts.requestTimeout, err)
		}
	})
	return ss.closeErr
}
