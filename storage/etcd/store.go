package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenurehq/tenure/storage"
)

// Store is a storage.RunnerStore on etcd. It does not own the client unless
// it was created by Dial.
type Store struct {
	cli       *clientv3.Client
	opts      options
	ownClient bool

	closeOnce sync.Once
	ctx       context.Context // cancelled by Close; parent of background work
	cancel    context.CancelFunc
	wg        sync.WaitGroup // background goroutines (watches)
}

var _ storage.RunnerStore = (*Store)(nil)

// New returns a Store using cli. Close does not close cli.
func New(cli *clientv3.Client, opts ...Option) (*Store, error) {
	if cli == nil {
		return nil, fmt.Errorf("etcd: new store: %w: nil client", storage.ErrInvalid)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Store{cli: cli, opts: o, ctx: ctx, cancel: cancel}, nil
}

func (o options) validate() error {
	bad := func(field, why string) error {
		return fmt.Errorf("etcd: option %s: %w: %s", field, storage.ErrInvalid, why)
	}
	switch {
	case o.prefix == "" || o.prefix[0] != '/':
		return bad("prefix", fmt.Sprintf("%q must start with /", o.prefix))
	case o.requestTimeout <= 0:
		return bad("request timeout", "must be positive")
	case o.retryBackoff <= 0:
		return bad("retry backoff", "must be positive")
	case o.acquireBatch < 1 || o.acquireBatch > 128:
		return bad("acquire batch", "must be in [1, 128] (etcd's default max-txn-ops)")
	case o.acquireConcurrency < 1:
		return bad("acquire concurrency", "must be at least 1")
	case o.logger == nil:
		return bad("logger", "must not be nil")
	}
	return nil
}

// Client returns the underlying etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix returns the store's key prefix.
func (s *Store) Prefix() string { return s.opts.prefix }

// Close stops background work (sessions end without revoking their leases,
// as with Session.Orphan; watches end) and closes the client if Dial
// created it.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
		if s.ownClient {
			err = s.cli.Close()
		}
	})
	return err
}

func (s *Store) endpoint() string { return strings.Join(s.cli.Endpoints(), ",") }

// withTimeout derives a call context bounded by the request timeout.
func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.requestTimeout)
}

// opError wraps err for operation op on key (relative to the prefix).
func (s *Store) opError(op, key string, parent context.Context, timeout time.Duration, err error) error {
	return &storage.OpError{
		Backend:  "etcd",
		Op:       op,
		Key:      s.opts.prefix + key,
		Endpoint: s.endpoint(),
		Err:      classify(parent, timeout, err),
	}
}

// classify maps an etcd client error to a storage sentinel, keeping the
// cause. parent is the caller's context: its own cancellation is reported as
// such, while the call's timeout firing is ErrUnavailable.
func classify(parent context.Context, timeout time.Duration, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storage.ErrCorrupt), errors.Is(err, storage.ErrInvalid),
		errors.Is(err, storage.ErrPrecondition), errors.Is(err, storage.ErrNotFound),
		errors.Is(err, storage.ErrLeaseLost), errors.Is(err, storage.ErrNotOwner),
		errors.Is(err, storage.ErrRunnerExists), errors.Is(err, storage.ErrMetaMismatch),
		errors.Is(err, storage.ErrSessionClosed):
		return err
	case parent != nil && parent.Err() != nil:
		return context.Cause(parent)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return storage.Wrap(storage.ErrLeaseLost, err)
	case errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded:
		return storage.Wrap(storage.ErrUnavailable, fmt.Errorf("no answer within %s: %w", timeout, err))
	}
	if isAuthError(err) {
		return storage.Wrap(storage.ErrAccessDenied, err)
	}
	return storage.Wrap(storage.ErrUnavailable, err)
}

func isAuthError(err error) bool {
	for _, e := range []error{
		rpctypes.ErrAuthFailed, rpctypes.ErrPermissionDenied, rpctypes.ErrInvalidAuthToken,
		rpctypes.ErrInvalidAuthMgmt, rpctypes.ErrAuthOldRevision, rpctypes.ErrUserEmpty,
		rpctypes.ErrGRPCAuthFailed, rpctypes.ErrGRPCPermissionDenied, rpctypes.ErrGRPCInvalidAuthToken,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unauthenticated, codes.PermissionDenied:
			return true
		}
	}
	return false
}

// leaseGone reports whether err says the lease no longer exists.
func leaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound)
}
