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

// batch is a step of a watch: the changes of one watch response (whole
// revisions: etcd never splits a revision across responses), or one
// listing. A consumer that applies whole batches holds the state of the
// watched range at rev after each.
type batch struct {
	changes []change
	rev     int64 // the range's revision once the batch is applied
	// listing: the batch is a listing at rev, not watch events. In a full
	// watch it holds a put for every key present and a delete for every
	// key gone since the previous batch; otherwise only the difference.
	listing bool
	resync  bool // a listing after the watch broke (not the first one)
	// broken: no changes; the watch just broke, and the listing that
	// resumes it (resync) has not been read yet. rev is the last batch's.
	broken bool
}

// each adapts a per-change consumer to batches.
func each(emit func(context.Context, change) bool) func(context.Context, batch) bool {
	return func(ctx context.Context, b batch) bool {
		for _, c := range b.changes {
			if !emit(ctx, c) {
				return false
			}
		}
		return true
	}
}

// watch runs a list-then-watch loop on key, or on the key range [key, end)
// when end is set (relative keys; prefixEnd gives a prefix's end), until ctx
// or the store ends, calling emit for every batch in revision order and
// done once at the end. emit returns false to stop (its context ended).
//
// The loop keeps the consumer's view: it remembers each key's modification
// revision, and whenever the watch breaks (compaction, lost leader, closed
// stream) it lists again and emits the difference — puts for new or changed
// keys (every key when full), deletes for vanished ones — marked Resync,
// before watching again from the list's revision. A break is announced at
// once with an empty batch marked broken, so that a consumer knows that
// nothing arrives until the re-list gets through.
func (s *Store) watch(ctx context.Context, key, end string, full bool, emit func(context.Context, batch) bool, done func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer done()
		defer stop()
		defer cancel()
		w := watcher{s: s, key: key, end: end, full: full, emit: emit, view: map[string]int64{}}
		w.run(ctx)
	}()
}

type watcher struct {
	s    *Store
	key  string
	end  string // relative range end; "" watches key alone
	full bool   // listings emit every key, not only the changed ones
	emit func(context.Context, batch) bool
	view map[string]int64 // relative key → mod revision
	rev  int64            // revision of the last batch emitted
}

// prefixEnd is the end of the key range of a prefix (relative keys share
// the store prefix, so its range end is the store prefix plus this).
func prefixEnd(prefix string) string { return clientv3.GetPrefixRangeEnd(prefix) }

// rangeOpts selects the watched range for a Get or a Watch.
func (w *watcher) rangeOpts() []clientv3.OpOption {
	if w.end == "" {
		return nil
	}
	return []clientv3.OpOption{clientv3.WithRange(w.s.opts.prefix + w.end)}
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
	opts := append([]clientv3.OpOption{clientv3.WithRev(rev)}, w.rangeOpts()...)
	for resp := range w.s.cli.Watch(wctx, full, opts...) {
		if err := resp.Err(); err != nil {
			w.s.opts.logger.Warn("etcd watch: broken; re-listing", "key", full, "err", err)
			return w.broke(ctx)
		}
		if len(resp.Events) == 0 {
			continue
		}
		b := batch{changes: make([]change, 0, len(resp.Events))}
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
			b.changes = append(b.changes, c)
			b.rev = max(b.rev, c.rev)
		}
		if !w.emit(ctx, b) {
			return false
		}
		w.rev = b.rev
	}
	return w.broke(ctx)
}

// broke announces a break of the watch, unless ctx ended (which is no
// break but the end); it returns whether to re-list.
func (w *watcher) broke(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	return w.emit(ctx, batch{rev: w.rev, broken: true})
}

// relist reads the current state and emits its difference from the view. ok
// is false when emit stopped.
func (w *watcher) relist(ctx context.Context, resync bool) (rev int64, ok bool, err error) {
	full := w.s.opts.prefix + w.key
	cctx, cancel := w.s.withTimeout(clientv3.WithRequireLeader(ctx))
	resp, err := w.s.cli.Get(cctx, full, w.rangeOpts()...)
	cancel()
	if err != nil {
		return 0, ctx.Err() == nil, w.s.opError("watch list", w.key, ctx, w.s.opts.requestTimeout, err)
	}
	rev = resp.Header.Revision
	b := batch{rev: rev, listing: true, resync: resync}
	seen := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		k := w.s.rel(kv.Key)
		seen[k] = true
		if old, had := w.view[k]; had && old == kv.ModRevision && !w.full {
			continue
		}
		w.view[k] = kv.ModRevision
		b.changes = append(b.changes, change{kind: storage.EventPut, key: k, kv: kv, rev: kv.ModRevision, resync: resync})
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
		b.changes = append(b.changes, change{kind: storage.EventDelete, key: k, rev: rev, resync: resync})
	}
	w.rev = rev
	if len(b.changes) == 0 && !w.full {
		return rev, true, nil
	}
	return rev, w.emit(ctx, b), nil
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
