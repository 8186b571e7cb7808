package etcd

import (
	"context"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/storage"
)

// change is one event of a watched key, relative to the store prefix.
type change struct {
	kind   storage.EventKind
	key    string
	kv     *mvccpb.KeyValue // the new value on put; nil on delete
	rev    int64
	resync bool
}

// watch runs a list-then-watch loop on key (a prefix when prefix is set)
// until ctx or the store ends, calling emit for every change in order and
// done once at the end. emit returns false to stop (its context ended).
//
// The loop keeps the consumer's view: it remembers each key's modification
// revision, and whenever the watch breaks (compaction, lost leader, closed
// stream) it lists again and emits the difference — puts for new or changed
// keys, deletes for vanished ones — marked Resync, before watching again from
// the list's revision.
func (s *Store) watch(ctx context.Context, key string, prefix bool, emit func(context.Context, change) bool, done func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer done()
		defer stop()
		defer cancel()
		w := watcher{s: s, key: key, prefix: prefix, emit: emit, view: map[string]int64{}}
		w.run(ctx)
	}()
}

type watcher struct {
	s      *Store
	key    string
	prefix bool
	emit   func(context.Context, change) bool
	view   map[string]int64 // relative key → mod revision
}

func (w *watcher) run(ctx context.Context) {
	full := w.s.opts.prefix + w.key
	backoff := w.s.opts.retryBackoff
	for first := true; ctx.Err() == nil; {
		rev, ok, err := w.relist(ctx, !first)
		if !ok {
			return
		}
		if err != nil {
			w.s.opts.logger.Warn("etcd watch: list failed; retrying", "key", full, "retry_in", backoff, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, DefaultMaxWatchBackoff)
			continue
		}
		if !first {
			w.s.opts.logger.Info("etcd watch: resumed after re-list", "key", full, "revision", rev)
		}
		first = false
		backoff = w.s.opts.retryBackoff
		if !w.follow(ctx, full, rev+1) {
			return
		}
	}
}

// follow watches from rev until the watch breaks (returns true: re-list) or
// ctx ends (returns false).
func (w *watcher) follow(ctx context.Context, full string, rev int64) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRev(rev)}
	if w.prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	for resp := range w.s.cli.Watch(wctx, full, opts...) {
		if err := resp.Err(); err != nil {
			w.s.opts.logger.Warn("etcd watch: broken; re-listing", "key", full, "err", err)
			return ctx.Err() == nil
		}
		for _, ev := range resp.Events {
			c := change{key: w.s.rel(ev.Kv.Key), rev: ev.Kv.ModRevision}
			if ev.Type == clientv3.EventTypeDelete {
				c.kind = storage.EventDelete
				delete(w.view, c.key)
			} else {
				c.kind = storage.EventPut
				c.kv = ev.Kv
				w.view[c.key] = ev.Kv.ModRevision
			}
			if !w.emit(ctx, c) {
				return false
			}
		}
	}
	return ctx.Err() == nil
}

// relist reads the current state and emits its difference from the view. ok
// is false when emit stopped.
func (w *watcher) relist(ctx context.Context, resync bool) (rev int64, ok bool, err error) {
	full := w.s.opts.prefix + w.key
	cctx, cancel := w.s.withTimeout(clientv3.WithRequireLeader(ctx))
	var opts []clientv3.OpOption
	if w.prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := w.s.cli.Get(cctx, full, opts...)
	cancel()
	if err != nil {
		return 0, ctx.Err() == nil, w.s.opError("watch list", w.key, ctx, w.s.opts.requestTimeout, err)
	}
	rev = resp.Header.Revision
	seen := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		k := w.s.rel(kv.Key)
		seen[k] = true
		if old, had := w.view[k]; had && old == kv.ModRevision {
			continue
		}
		w.view[k] = kv.ModRevision
		if !w.emit(ctx, change{kind: storage.EventPut, key: k, kv: kv, rev: kv.ModRevision, resync: resync}) {
			return rev, false, nil
		}
	}
	var gone []string
	for k := range w.view {
		if !seen[k] {
			gone = append(gone, k)
		}
	}
	slices.Sort(gone)
	for _, k := range gone {
		delete(w.view, k)
		if !w.emit(ctx, change{kind: storage.EventDelete, key: k, rev: rev, resync: resync}) {
			return rev, false, nil
		}
	}
	return rev, true, nil
}

// send delivers v on ch unless ctx ends first.
func send[T any](ctx context.Context, ch chan<- T, v T) bool {
	select {
	case ch <- v:
		return true
	case <-ctx.Done():
		return false
	}
}
