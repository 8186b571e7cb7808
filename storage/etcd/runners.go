package etcd

import (
	"context"
	"errors"
	"strings"

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

func (s *Store) runnerEvent(c change) storage.RunnerEvent {
	ev := storage.RunnerEvent{Kind: c.kind, ID: c.key[len(runnersPrefix):], Revision: c.rev, Resync: c.resync}
	if c.kind == storage.EventPut {
		ev.Runner, ev.Err = s.decodeRunner(c.kv)
	}
	return ev
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
	s.watch(ctx, shardsPrefix, prefixEnd(shardsPrefix), false, each(func(ctx context.Context, c change) bool {
		return send(ctx, out, s.lockEvent(c))
	}), func() { close(out) })
	return out
}

func (s *Store) lockEvent(c change) storage.LockEvent {
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
	return ev
}

// Membership lists runners/ and shards/ with one range read, so both are
// at one revision: the range from runners/ to the end of shards/ holds
// nothing else of the layout (config, meta and wake/ sort outside it; keys
// that would fall inside are skipped).
func (s *Store) Membership(ctx context.Context) (storage.MembershipBatch, error) {
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.opts.prefix+runnersPrefix, clientv3.WithRange(s.opts.prefix+prefixEnd(shardsPrefix)))
	if err != nil {
		return storage.MembershipBatch{}, s.opError("list membership", runnersPrefix+" "+shardsPrefix, ctx, s.opts.requestTimeout, err)
	}
	b := storage.MembershipBatch{Revision: resp.Header.Revision, Listing: true}
	var errs []error
	for _, kv := range resp.Kvs {
		ev, ok := s.membershipEvent(change{kind: storage.EventPut, key: s.rel(kv.Key), kv: kv, rev: kv.ModRevision})
		if !ok {
			continue
		}
		if err := eventErr(ev); err != nil {
			errs = append(errs, err)
		}
		b.Events = append(b.Events, ev)
	}
	return b, errors.Join(errs...)
}

// WatchMembership streams runners/ and shards/ as one stream of batches:
// one watch on the range Membership reads, so etcd delivers the changes of
// both in revision order and whole revisions at a time, and every listing
// reads both at one revision. A break of the watch is announced at once
// by a batch marked Interrupted, before the Resync listing that resumes it.
func (s *Store) WatchMembership(ctx context.Context) <-chan storage.MembershipBatch {
	out := make(chan storage.MembershipBatch, 16)
	s.watch(ctx, runnersPrefix, prefixEnd(shardsPrefix), true, func(ctx context.Context, b batch) bool {
		mb := storage.MembershipBatch{Revision: b.rev, Listing: b.listing, Resync: b.resync, Interrupted: b.broken,
			Events: make([]storage.MembershipEvent, 0, len(b.changes))}
		for _, c := range b.changes {
			if ev, ok := s.membershipEvent(c); ok {
				mb.Events = append(mb.Events, ev)
			}
		}
		if len(mb.Events) == 0 && !mb.Listing && !mb.Interrupted {
			return true // only keys outside both prefixes changed
		}
		return send(ctx, out, mb)
	}, func() { close(out) })
	return out
}

// membershipEvent decodes a change of the membership range; ok is false for
// a key outside runners/ and shards/.
func (s *Store) membershipEvent(c change) (storage.MembershipEvent, bool) {
	switch {
	case strings.HasPrefix(c.key, runnersPrefix):
		ev := s.runnerEvent(c)
		return storage.MembershipEvent{Runner: &ev}, true
	case strings.HasPrefix(c.key, shardsPrefix):
		ev := s.lockEvent(c)
		return storage.MembershipEvent{Lock: &ev}, true
	}
	return storage.MembershipEvent{}, false
}

func eventErr(ev storage.MembershipEvent) error {
	if ev.Runner != nil {
		return ev.Runner.Err
	}
	return ev.Lock.Err
}
