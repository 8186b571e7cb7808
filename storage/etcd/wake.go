package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/storage"
)

// Wake puts note on wake/<group>/<index>: one small write whose watch event
// reaches the shard's owner in milliseconds, in commit order. The key holds
// only the latest note, so wake-ups cost no storage beyond one key a shard.
func (s *Store) Wake(ctx context.Context, shard storage.ShardID, note string) error {
	key := wakeKey(shard)
	if err := validateShard(shard); err != nil {
		return s.opError("wake", key, ctx, 0, err)
	}
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if _, err := s.cli.Put(cctx, s.opts.prefix+key, note); err != nil {
		return s.opError("wake", key, ctx, s.opts.requestTimeout, err)
	}
	return nil
}

// WatchWakes watches wake/<group>/<index>. It returns once etcd has created
// the watch; when the watch later breaks (compaction, lost leader,
// disconnect) it sends a Resync event and watches again from the current
// revision.
func (s *Store) WatchWakes(ctx context.Context, shard storage.ShardID) (<-chan storage.WakeEvent, error) {
	key := wakeKey(shard)
	if err := validateShard(shard); err != nil {
		return nil, s.opError("watch wakes", key, ctx, 0, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	wch, wcancel, err := s.openWakeWatch(ctx, key)
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	out := make(chan storage.WakeEvent, 64)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer stop()
		defer cancel()
		defer func() {
			if wcancel != nil {
				wcancel()
			}
		}()
		backoff := s.opts.retryBackoff
		for {
			for resp := range wch {
				if err := resp.Err(); err != nil {
					s.opts.logger.Warn("etcd wake watch broken; resyncing", "key", s.opts.prefix+key, "err", err)
					break
				}
				for _, ev := range resp.Events {
					if ev.Type != clientv3.EventTypePut {
						continue
					}
					if !send(ctx, out, storage.WakeEvent{Shard: shard, Note: string(ev.Kv.Value), Revision: ev.Kv.ModRevision}) {
						return
					}
				}
			}
			if ctx.Err() != nil {
				return
			}
			// Re-watch from now, then tell the consumer it may have missed
			// wake-ups in between.
			wcancel()
			wcancel = nil
			for {
				wch, wcancel, err = s.openWakeWatch(ctx, key)
				if err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, DefaultMaxWatchBackoff)
			}
			backoff = s.opts.retryBackoff
			if !send(ctx, out, storage.WakeEvent{Shard: shard, Resync: true}) {
				return
			}
		}
	}()
	return out, nil
}

// openWakeWatch starts a watch of key and waits (bounded by the request
// timeout) for etcd to confirm it. cancel ends the watch.
func (s *Store) openWakeWatch(ctx context.Context, key string) (wch clientv3.WatchChan, cancel context.CancelFunc, err error) {
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch = s.cli.Watch(wctx, s.opts.prefix+key, clientv3.WithCreatedNotify())
	timer := time.NewTimer(s.opts.requestTimeout)
	defer timer.Stop()
	select {
	case resp, ok := <-wch:
		if !ok || resp.Err() != nil || !resp.Created {
			wcancel()
			err := fmt.Errorf("watch not created")
			if ok && resp.Err() != nil {
				err = resp.Err()
			}
			return nil, nil, s.opError("watch wakes", key, ctx, s.opts.requestTimeout, err)
		}
	case <-timer.C:
		wcancel()
		return nil, nil, s.opError("watch wakes", key, ctx, s.opts.requestTimeout, context.DeadlineExceeded)
	case <-ctx.Done():
		wcancel()
		return nil, nil, s.opError("watch wakes", key, ctx, 0, ctx.Err())
	}
	return wch, wcancel, nil
}
