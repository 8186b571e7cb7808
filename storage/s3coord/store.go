package s3coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// errNotImplemented is returned by the parts not yet built.
var errNotImplemented = errors.New("s3coord: not implemented")

// Store is a storage.RunnerStore on a storage.ObjectStore.
type Store struct {
	objects storage.ObjectStore
	opts    options

	closeOnce sync.Once
	ctx       context.Context // cancelled by Close; parent of background work
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

var _ storage.RunnerStore = (*Store)(nil)

// New returns a runner store on objects (keys relative to objects' own
// prefix); it makes no request.
func New(objects storage.ObjectStore, opts ...Option) (*Store, error) {
	if objects == nil {
		return nil, fmt.Errorf("s3coord: new store: %w: nil object store", storage.ErrInvalid)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Store{objects: objects, opts: o, ctx: ctx, cancel: cancel}, nil
}

func (o options) validate() error {
	bad := func(field, why string) error {
		return fmt.Errorf("s3coord: option %s: %w: %s", field, storage.ErrInvalid, why)
	}
	switch {
	case o.requestTimeout <= 0:
		return bad("request timeout", "must be positive")
	case o.minPoll <= 0 || o.maxPoll < o.minPoll:
		return bad("poll interval", fmt.Sprintf("min %s and max %s must be positive, min <= max", o.minPoll, o.maxPoll))
	case o.logger == nil:
		return bad("logger", "must not be nil")
	case o.now == nil:
		return bad("clock", "must not be nil")
	}
	return nil
}

// Close stops background work: watches end, and sessions end without
// revoking their leases (as with Session.Orphan).
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

func (s *Store) opError(op, key string, err error) error {
	return &storage.OpError{Backend: "s3coord", Op: op, Key: key, Endpoint: s.opts.endpoint, Err: err}
}

// EnsureMeta implements storage.ClusterMetaStore.
func (s *Store) EnsureMeta(ctx context.Context, m storage.ClusterMeta) (storage.ClusterMeta, error) {
	return storage.ClusterMeta{}, s.opError("ensure meta", "meta", errNotImplemented)
}

// Meta implements storage.ClusterMetaStore.
func (s *Store) Meta(ctx context.Context) (storage.ClusterMeta, error) {
	return storage.ClusterMeta{}, s.opError("meta", "meta", errNotImplemented)
}

// Register implements storage.Registrar.
func (s *Store) Register(ctx context.Context, r storage.RunnerInfo, ttl time.Duration) (storage.Session, error) {
	return nil, s.opError("register", "runners/"+r.ID, errNotImplemented)
}

// Runners implements storage.MembershipReader.
func (s *Store) Runners(ctx context.Context) ([]storage.RunnerInfo, int64, error) {
	return nil, 0, s.opError("list runners", "runners/", errNotImplemented)
}

// Membership implements storage.MembershipReader.
func (s *Store) Membership(ctx context.Context) (storage.MembershipBatch, error) {
	return storage.MembershipBatch{}, s.opError("membership", "runners/", errNotImplemented)
}

// WatchMembership implements storage.MembershipReader.
func (s *Store) WatchMembership(ctx context.Context) <-chan storage.MembershipBatch {
	ch := make(chan storage.MembershipBatch)
	close(ch)
	return ch
}

// ShardLocks implements storage.ShardLockReader.
func (s *Store) ShardLocks(ctx context.Context) ([]storage.ShardLock, int64, error) {
	return nil, 0, s.opError("list shard locks", "shards/", errNotImplemented)
}

// WatchShardLocks implements storage.ShardLockReader.
func (s *Store) WatchShardLocks(ctx context.Context) <-chan storage.LockEvent {
	ch := make(chan storage.LockEvent)
	close(ch)
	return ch
}

// LeaseTimeToLive implements storage.LeaseReader.
func (s *Store) LeaseTimeToLive(ctx context.Context, leaseID int64) (storage.LeaseTime, error) {
	return storage.LeaseTime{}, s.opError("lease time-to-live", "runners/", errNotImplemented)
}

// Config implements storage.DynamicConfig.
func (s *Store) Config(ctx context.Context) (storage.ConfigValue, error) {
	return storage.ConfigValue{}, s.opError("config", "config", errNotImplemented)
}

// PutConfig implements storage.DynamicConfig.
func (s *Store) PutConfig(ctx context.Context, value []byte, prevRevision int64) (int64, error) {
	return 0, s.opError("put config", "config", errNotImplemented)
}

// WatchConfig implements storage.DynamicConfig.
func (s *Store) WatchConfig(ctx context.Context) <-chan storage.ConfigEvent {
	ch := make(chan storage.ConfigEvent)
	close(ch)
	return ch
}

// Wake implements storage.Waker.
func (s *Store) Wake(ctx context.Context, shard storage.ShardID, note string) error {
	return s.opError("wake", "wake/"+shard.String(), errNotImplemented)
}

// WatchWakes implements storage.WakeWatcher.
func (s *Store) WatchWakes(ctx context.Context, shard storage.ShardID) (<-chan storage.WakeEvent, error) {
	return nil, s.opError("watch wakes", "wake/"+shard.String(), errNotImplemented)
}
