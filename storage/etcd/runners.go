package etcd

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/storage"
)

// Runners lists live runners with the revision of the read. Undecodable
// records are left out and reported together in the error (wrapping
// storage.ErrCorrupt) alongside the decodable ones.
func (s *Store) Runners(ctx context.Context) ([]storage.RunnerInfo, int64, error) {
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.opts.prefix+runnersPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, s.opError("list runners", runnersPrefix, ctx, s.opts.requestTimeout, err)
	}
	out := make([]storage.RunnerInfo, 0, len(resp.Kvs))
	var errs []error
	for _, kv := range resp.Kvs {
		r, err := s.decodeRunner(kv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	return out, resp.Header.Revision, errors.Join(errs...)
}

// WatchRunners streams changes to runners/, starting with a put for every
// live runner.
func (s *Store) WatchRunners(ctx context.Context) <-chan storage.RunnerEvent {
	out := make(chan storage.RunnerEvent, 16)
	s.watch(ctx, runnersPrefix, true, func(ctx context.Context, c change) bool {
		ev := storage.RunnerEvent{Kind: c.kind, ID: c.key[len(runnersPrefix):], Revision: c.rev, Resync: c.resync}
		if c.kind == storage.EventPut {
			ev.Runner, ev.Err = s.decodeRunner(c.kv)
		}
		return send(ctx, out, ev)
	}, func() { close(out) })
	return out
}

// ShardLocks lists held shard locks with the revision of the read, handling
// undecodable records as Runners does.
func (s *Store) ShardLocks(ctx context.Context) ([]storage.ShardLock, int64, error) {
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.opts.prefix+shardsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, s.opError("list shard locks", shardsPrefix, ctx, s.opts.requestTimeout, err)
	}
	out := make([]storage.ShardLock, 0, len(resp.Kvs))
	var errs []error
	for _, kv := range resp.Kvs {
		l, err := s.decodeLock(kv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, l)
	}
	return out, resp.Header.Revision, errors.Join(errs...)
}

// WatchShardLocks streams changes to shards/, starting with a put for every
// held lock.
func (s *Store) WatchShardLocks(ctx context.Context) <-chan storage.LockEvent {
	out := make(chan storage.LockEvent, 64)
	s.watch(ctx, shardsPrefix, true, func(ctx context.Context, c change) bool {
		ev := storage.LockEvent{Kind: c.kind, Revision: c.rev, Resync: c.resync}
		if c.kind == storage.EventPut {
			ev.Lock, ev.Err = s.decodeLock(c.kv)
			ev.Shard = ev.Lock.Shard
		} else {
			shard, err := parseShardKey(c.key)
			if err != nil {
				ev.Err = s.corrupt(c.key, err)
			}
			ev.Shard = shard
		}
		return send(ctx, out, ev)
	}, func() { close(out) })
	return out
}
