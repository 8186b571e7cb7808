package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// lockEvent is one change of a shard lock as the bench saw it, stamped
// with the time it arrived: the bench's single clock for handover figures.
type lockEvent struct {
	at     time.Time
	shard  storage.ShardID
	holder string // "" when deleted
	prev   string // the holder before the change
}

// lockTracker follows a cluster's shard locks through an etcd watch and
// answers "when did the locks first satisfy …" with the arrival time of
// the event that made them.
type lockTracker struct {
	mu      sync.Mutex
	holders map[storage.ShardID]string
	events  []lockEvent
	waiters map[*lockWaiter]struct{}
	err     error // the watch ended early
	done    chan struct{}
}

type lockWaiter struct {
	pred func(map[storage.ShardID]string) bool
	at   chan time.Time // buffered: receives once
}

// watchLocks starts following the locks of store's cluster until ctx ends.
func watchLocks(ctx context.Context, store storage.ShardLockReader) *lockTracker {
	t := &lockTracker{holders: map[storage.ShardID]string{}, waiters: map[*lockWaiter]struct{}{}, done: make(chan struct{})}
	events := store.WatchShardLocks(ctx)
	go func() {
		defer close(t.done)
		for ev := range events {
			t.apply(time.Now(), ev)
		}
		t.mu.Lock()
		if ctx.Err() == nil {
			t.err = errors.New("bench: the shard lock watch ended")
		} else {
			t.err = ctx.Err()
		}
		t.mu.Unlock()
	}()
	return t
}

func (t *lockTracker) apply(at time.Time, ev storage.LockEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	prev := t.holders[ev.Shard]
	holder := ""
	if ev.Kind == storage.EventPut && ev.Err == nil {
		holder = ev.Lock.RunnerID
	}
	if holder == "" {
		delete(t.holders, ev.Shard)
	} else {
		t.holders[ev.Shard] = holder
	}
	if holder != prev {
		t.events = append(t.events, lockEvent{at: at, shard: ev.Shard, holder: holder, prev: prev})
	}
	for w := range t.waiters {
		if w.pred(t.holders) {
			w.at <- at
			delete(t.waiters, w)
		}
	}
}

// wait waits for the watch goroutine to end (after its context).
func (t *lockTracker) wait() { <-t.done }

// snapshot returns the current holders.
func (t *lockTracker) snapshot() map[storage.ShardID]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[storage.ShardID]string, len(t.holders))
	for s, h := range t.holders {
		out[s] = h
	}
	return out
}

// since returns the events that arrived at or after from.
func (t *lockTracker) since(from time.Time) []lockEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []lockEvent
	for _, ev := range t.events {
		if !ev.at.Before(from) {
			out = append(out, ev)
		}
	}
	return out
}

// await returns the arrival time of the first event after which pred
// holds (now, if it holds already), or an error after within or when ctx
// ends. pred is called with the tracker locked and must not keep the map.
func (t *lockTracker) await(ctx context.Context, what string, within time.Duration, pred func(map[storage.ShardID]string) bool) (time.Time, error) {
	w := &lockWaiter{pred: pred, at: make(chan time.Time, 1)}
	t.mu.Lock()
	if t.err != nil {
		err := t.err
		t.mu.Unlock()
		return time.Time{}, err
	}
	if pred(t.holders) {
		t.mu.Unlock()
		return time.Now(), nil
	}
	t.waiters[w] = struct{}{}
	t.mu.Unlock()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case at := <-w.at:
		return at, nil
	case <-timer.C:
	case <-ctx.Done():
	case <-t.done:
	}
	t.mu.Lock()
	delete(t.waiters, w)
	held := len(t.holders)
	err := t.err
	t.mu.Unlock()
	select {
	case at := <-w.at: // satisfied meanwhile
		return at, nil
	default:
	}
	switch {
	case ctx.Err() != nil:
		return time.Time{}, ctx.Err()
	case err != nil:
		return time.Time{}, fmt.Errorf("waiting for %s: %w", what, err)
	}
	return time.Time{}, fmt.Errorf("bench: timed out after %s waiting for %s (%d shards locked)", within, what, held)
}
