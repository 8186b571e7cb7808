package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// LockChange is one event of a shard's lock as a LockTimeline saw it.
type LockChange struct {
	// At is when the event arrived at the watch: the observer's single
	// clock. It trails the change itself.
	At     time.Time
	Shard  storage.ShardID
	Holder string // the runner holding the lock after the change; "" when released
	Prev   string // the holder before it
	Epoch  int64  // the holder's epoch (the lock's create revision)
	Rev    int64  // the backend's revision of the change
	// Resync marks a change learnt by a listing after the watch broke,
	// not as it happened.
	Resync bool
}

// who names the holder after the change, "holder@epoch" or "released".
func (ch LockChange) who() string {
	if ch.Holder == "" {
		return "released"
	}
	return fmt.Sprintf("%s@%d", ch.Holder, ch.Epoch)
}

// String describes the change for a report: its arrival, revision and
// holder after it, and whether a re-listing showed it.
func (ch LockChange) String() string {
	s := fmt.Sprintf("%s rev %d %s", stamp(ch.At), ch.Rev, ch.who())
	if ch.Resync {
		s += " (re-listed)"
	}
	return s
}

// stamp formats a time of the observers' single clock for a report.
func stamp(t time.Time) string { return t.Format("15:04:05.000") }

// LockTimeline is the history of a cluster's shard-lock holders, from an
// etcd watch of the observer's own (not through any member's proxy): who
// held which shard, under which epoch, when. It answers the audit's "was
// this execution inside its runner's tenure" and the bench's "when did the
// locks first satisfy …".
type LockTimeline struct {
	mu      sync.Mutex
	log     map[storage.ShardID][]LockChange // every event, by shard
	changes []LockChange                     // the events that changed a holder, in arrival order
	holders map[storage.ShardID]string
	waiters map[*lockWaiter]struct{}
	err     error // why the watch ended, once it has
	done    chan struct{}
	// lag, when set, is how far a polled watch's observations may trail
	// the changes (one poll): HeldThroughout then also checks the
	// acquisition edge (see NewPolledLockTimeline).
	lag time.Duration
	// history, when set, reads the backend's own record of the locks
	// (etcd's MVCC history): see ReadHistory and Judge.
	history LockHistoryReader
}

type lockWaiter struct {
	pred func(map[storage.ShardID]string) bool
	at   chan time.Time // buffered: receives once
}

// NewLockTimeline returns an empty timeline, fed by Record; WatchLocks
// returns one fed by a watch.
func NewLockTimeline() *LockTimeline {
	return &LockTimeline{log: map[storage.ShardID][]LockChange{}, holders: map[storage.ShardID]string{},
		waiters: map[*lockWaiter]struct{}{}, done: make(chan struct{})}
}

// NewPolledLockTimeline returns an empty timeline for a watch that polls
// (coordination on S3) and whose observations trail the changes by at most
// lag (one poll). Unlike an etcd watch, which a cluster without a leader
// holds back for as long as that lasts, a poll of the store directly sees
// a lock within lag of its acquisition, so HeldThroughout can test the
// acquisition edge by time too: the tenure must have been observed by the
// execution's start plus lag, unless a re-listing after a failed poll
// first showed it (its arrival then says nothing). The release edge is
// unchanged: a later arrival errs towards "held", and gets no lag.
func NewPolledLockTimeline(lag time.Duration) *LockTimeline {
	l := NewLockTimeline()
	l.lag = lag
	return l
}

// WatchLocks follows the shard locks of locks' cluster until ctx ends.
// Give it a store with a short retry back-off: after a break (the loss of
// etcd's leader breaks it) the watch re-lists, and catches up as soon as
// etcd answers again.
//
// When locks also reads its backend's history of the locks (an etcd
// store: LockHistoryReader), the timeline's ReadHistory reads it.
func WatchLocks(ctx context.Context, locks storage.ShardLockReader) *LockTimeline {
	l := NewLockTimeline()
	l.history, _ = locks.(LockHistoryReader)
	return watchInto(ctx, locks, l)
}

// WatchPolledLocks is WatchLocks for a store whose watch polls, its
// observations trailing the changes by at most lag (see
// NewPolledLockTimeline).
func WatchPolledLocks(ctx context.Context, locks storage.ShardLockReader, lag time.Duration) *LockTimeline {
	return watchInto(ctx, locks, NewPolledLockTimeline(lag))
}

// watchInto feeds l from locks' watch until ctx ends.
func watchInto(ctx context.Context, locks storage.ShardLockReader, l *LockTimeline) *LockTimeline {
	events := locks.WatchShardLocks(ctx)
	go func() {
		defer close(l.done)
		for ev := range events {
			l.Record(time.Now(), ev)
		}
		l.mu.Lock()
		if ctx.Err() == nil {
			l.err = errors.New("harness: the shard lock watch ended")
		} else {
			l.err = ctx.Err()
		}
		l.mu.Unlock()
	}()
	return l
}

// Record adds ev, arrived at at, and wakes the waiters it satisfies: the
// watch's way in, and a test's. Not to be mixed with a watch's events.
func (l *LockTimeline) Record(at time.Time, ev storage.LockEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := LockChange{At: at, Shard: ev.Shard, Prev: l.holders[ev.Shard], Rev: ev.Revision, Resync: ev.Resync}
	if ev.Kind == storage.EventPut && ev.Err == nil {
		ch.Holder, ch.Epoch = ev.Lock.RunnerID, ev.Lock.Epoch
	}
	l.log[ev.Shard] = append(l.log[ev.Shard], ch)
	if ch.Holder == "" {
		delete(l.holders, ev.Shard)
	} else {
		l.holders[ev.Shard] = ch.Holder
	}
	if ch.Holder != ch.Prev {
		l.changes = append(l.changes, ch)
	}
	for w := range l.waiters {
		if w.pred(l.holders) {
			w.at <- at
			delete(l.waiters, w)
		}
	}
}

// Wait waits for the watch to end (after its context).
func (l *LockTimeline) Wait() { <-l.done }

// HeldThroughout reports whether runner held shard's lock under epoch for
// the whole of [start, end], by the timeline alone (Judge adds the
// backend's own history).
//
// That the tenure had begun by start is proven by the execution itself: the
// epoch is the lock's create revision, which the runner learnt from etcd
// when it acquired the lock, before it claimed the task; so the tenure need
// only appear in the log, whenever the watch delivered it (a watch cut off
// by the loss of etcd's leader delivers it late, after the runner has
// started work: the arrival time says nothing then). That nothing ended the
// tenure before end is read from arrival times: the first later change of
// the shard's lock (a release, another holder or epoch) must arrive after
// end. Arrivals trail the changes, so this errs towards "held". On a
// polled timeline (NewPolledLockTimeline) the tenure must also have been
// first observed by start plus the poll lag, unless a re-listing first
// showed it; and where the poll showed it in several spans (a lease it
// judged lapsed, renewed by its holder after all), the execution must fit
// in one of them.
func (l *LockTimeline) HeldThroughout(shard storage.ShardID, runner string, epoch int64, start, end time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.liveLocked(shard, runner, epoch, start, end).Held
}

// liveLocked is HeldThroughout's verdict, with its reason and whether the
// timeline showed the tenure at all (seen).
func (l *LockTimeline) liveLocked(shard storage.ShardID, runner string, epoch int64, start, end time.Time) (v LockVerdict) {
	evs := l.log[shard]
	same := func(ch LockChange) bool { return ch.Holder == runner && ch.Epoch == epoch }
	i := slices.IndexFunc(evs, same)
	if i < 0 {
		return LockVerdict{Why: "the lock watch never showed the tenure"}
	}
	v.seen = true
	if l.lag == 0 {
		return l.spanLocked(evs, i, same, start, end)
	}
	// A polled timeline may show the tenure in several spans: a poll drops
	// the locks of a lease it judges lapsed (its reading of the store's
	// clock certainly past the expiry), and the holder, whose own reading
	// is less certain, may still renew it; the next poll shows the same
	// locks again. The same epoch proves the lock never changed hands in
	// between (a take writes epoch + 1, and a lapsed lease is taken only
	// after its record is tombstoned, which forbids the renewal), as long
	// as the poll showed no other tenure between the spans; so the
	// execution is judged against the span it began in: it must fit in
	// one span, begin after the previous span's end arrived, and a span's
	// observation edge is held to the lag as the first one's is (with no
	// exception for a re-listing: the poll had seen the lease lapse, and
	// only a renewal observed in time shows that the execution began
	// under it).
	if first := evs[i]; !first.Resync && first.At.After(start.Add(l.lag)) {
		v.Why = fmt.Sprintf("the tenure was first observed at %s, past the start plus the poll lag (%s)", stamp(first.At), l.lag)
		return v
	}
	v = l.spanLocked(evs, i, same, start, end)
	for j := i + 1; j < len(evs) && !v.Held; j++ {
		if h := evs[j].Holder; h != "" && !same(evs[j]) {
			break // another tenure in between: the lock changed hands
		}
		if !same(evs[j]) || same(evs[j-1]) {
			continue // not the start of a span
		}
		if evs[j].At.After(start.Add(l.lag)) {
			break // this span, and any later one, was observed after the execution began
		}
		if !start.After(evs[j-1].At) {
			continue // the execution ran across the previous span's end
		}
		v = l.spanLocked(evs, j, same, start, end)
	}
	return v
}

// spanLocked judges [start, end] against the span of the tenure that
// evs[i] begins: no change that ends it may arrive before end.
func (l *LockTimeline) spanLocked(evs []LockChange, i int, same func(LockChange) bool, start, end time.Time) (v LockVerdict) {
	v.seen = true
	for _, ch := range evs[i+1:] {
		if same(ch) {
			continue // the same tenure, listed again
		}
		if ch.At.Before(end) {
			v.Why = fmt.Sprintf("the lock watch delivered its end (rev %d, %s) at %s, before the execution ended", ch.Rev, ch.who(), stamp(ch.At))
			return v
		}
		break
	}
	v.Held = true
	return v
}

// Around describes shard's lock events that arrived within d of [start,
// end], for a report.
func (l *LockTimeline) Around(shard storage.ShardID, start, end time.Time, d time.Duration) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	for _, ch := range l.log[shard] {
		if ch.At.Before(start.Add(-d)) || ch.At.After(end.Add(d)) {
			continue
		}
		parts = append(parts, ch.String())
	}
	if len(parts) == 0 {
		return "no change within " + d.String()
	}
	return strings.Join(parts, "; ")
}

// Holders returns the current holders: shard → runner id.
func (l *LockTimeline) Holders() map[storage.ShardID]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[storage.ShardID]string, len(l.holders))
	for s, h := range l.holders {
		out[s] = h
	}
	return out
}

// Since returns the changes of holder that arrived at or after from, in
// arrival order (a lock listed again under the same holder is not one).
func (l *LockTimeline) Since(from time.Time) []LockChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	return since(l.changes, func(ch LockChange) time.Time { return ch.At }, from)
}

// Await returns the arrival time of the first event after which pred
// holds of the holders (now, if it holds already), or an error after
// within, when ctx ends or when the watch ends. pred is called with the
// timeline locked and must not keep the map.
func (l *LockTimeline) Await(ctx context.Context, what string, within time.Duration, pred func(map[storage.ShardID]string) bool) (time.Time, error) {
	w := &lockWaiter{pred: pred, at: make(chan time.Time, 1)}
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return time.Time{}, err
	}
	if pred(l.holders) {
		l.mu.Unlock()
		return time.Now(), nil
	}
	l.waiters[w] = struct{}{}
	l.mu.Unlock()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case at := <-w.at:
		return at, nil
	case <-timer.C:
	case <-ctx.Done():
	case <-l.done:
	}
	l.mu.Lock()
	delete(l.waiters, w)
	held := len(l.holders)
	err := l.err
	l.mu.Unlock()
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
	return time.Time{}, fmt.Errorf("harness: %w after %s waiting for %s (%d shards locked)", ErrTimeout, within, what, held)
}
