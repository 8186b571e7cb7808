package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// LockHistoryReader reads a backend's own history of the shard locks:
// storage/etcd's Store reads etcd's MVCC history.
type LockHistoryReader interface {
	ShardLockHistory(ctx context.Context) (etcd.LockHistory, error)
}

// LockHistory is the backend's own history of the shard locks, as
// LockTimeline.ReadHistory read it.
type LockHistory struct {
	etcd.LockHistory
	// Asked is when the read began, on the observers' clock: the history
	// holds every change up to a revision current at or after it.
	Asked time.Time
}

// ReadHistory reads the backend's own history of the shard locks through
// the store the timeline watches, when it keeps one (an etcd store:
// etcd's MVCC history, read directly, not through any member's proxy). It
// returns nil and no error when there is none: a polled timeline
// (coordination on S3), or one fed by Record. Read it once the executions
// to judge have ended (see Judge).
func (l *LockTimeline) ReadHistory(ctx context.Context) (*LockHistory, error) {
	if l.history == nil {
		return nil, nil
	}
	h := &LockHistory{Asked: time.Now()}
	var err error
	if h.LockHistory, err = l.history.ShardLockHistory(ctx); err != nil {
		return nil, fmt.Errorf("harness: reading the shard locks' history: %w", err)
	}
	return h, nil
}

// LockVerdict is the lock check's verdict on one execution.
type LockVerdict struct {
	// Held is set when the execution was inside its runner's tenure.
	Held bool
	// Why says, when not Held, what proved the execution outside the
	// tenure or what could not be placed.
	Why string
	// ByHistory is set when the live timeline never showed the tenure
	// and etcd's history placed it (Judge): the verdict the timeline
	// alone would have given is "not held". The audit counts these, so
	// that a run says how often the history decided.
	ByHistory bool
	// seen is set when the live timeline showed the tenure.
	seen bool
}

// neverExisted begins the reason of an execution under a tenure etcd's
// history does not have: a tenure no runner can have been granted.
const neverExisted = "the tenure never existed in etcd's history"

// Judge reports whether runner held shard's lock under epoch for the
// whole of [start, end], by the live timeline and, when hist is set,
// etcd's own history of the locks (ReadHistory, read after end). Without
// hist, and on a polled timeline, it is HeldThroughout, with a reason.
//
// With hist, the tenure is looked up there first: a lock of shard whose
// create revision is epoch, created holding runner. If etcd never had it,
// the execution is flagged as under a tenure that never existed (unless
// the history is compacted past epoch, where it can no longer be looked
// up: HeldThroughout's verdict then). A tenure the live timeline showed
// is then judged exactly as by HeldThroughout. One the live watch never
// saw (created and deleted while it was cut off and re-listing, so that
// no listing showed it) is judged by its end in the history, R_end, the
// revision of the next event of its key (its deletion): it is held unless
// the live watch delivered an event of any shard's key with a revision at
// or past R_end (a change, or a re-listing's, whose revision is the
// listing's for a deletion) before end — revisions are one order across
// every key, so that event proves etcd had ended the tenure by then. Arrivals trail the changes, so this errs
// towards "held", as HeldThroughout's release edge does. A tenure with
// no end in the history was held at least until the history was read,
// after end. That the tenure began before start is proven by its epoch:
// the runner learnt it from etcd when it took the lock, before it claimed
// the task.
func (l *LockTimeline) Judge(hist *LockHistory, shard storage.ShardID, runner string, epoch int64, start, end time.Time) LockVerdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	live := l.liveLocked(shard, runner, epoch, start, end)
	if hist == nil || l.lag > 0 {
		return live
	}
	evs := hist.Shards[shard]
	i := -1
	for j, ev := range evs {
		if ev.Kind == storage.EventPut && ev.Lock.Epoch == epoch {
			i = j
			break
		}
	}
	switch {
	case i < 0 && hist.Compacted > epoch:
		if !live.Held {
			live.Why += fmt.Sprintf("; etcd's history is compacted below revision %d and cannot place the tenure", hist.Compacted)
		}
		return live
	case i < 0:
		return LockVerdict{Why: fmt.Sprintf("%s: no lock of %s was created at revision %d", neverExisted, shard, epoch)}
	case evs[i].Lock.RunnerID != runner:
		return LockVerdict{Why: fmt.Sprintf("%s: the lock of %s created at revision %d was %s's", neverExisted, shard, epoch, evs[i].Lock.RunnerID)}
	case live.seen:
		return live
	}
	var rEnd int64
	for _, ev := range evs[i+1:] {
		if ev.Kind == storage.EventDelete || ev.Lock.Epoch != epoch {
			rEnd = ev.Revision
			break
		}
	}
	if rEnd == 0 {
		if hist.Asked.Before(end) {
			return LockVerdict{Why: fmt.Sprintf("the tenure was held at revision %d, but etcd's history was read at %s, before the execution ended", hist.Revision, stamp(hist.Asked)), ByHistory: true}
		}
		return LockVerdict{Held: true, ByHistory: true}
	}
	// Any shard's event will do: revisions are one order across every
	// key, so an event at or past rEnd, whichever key it changed, proves
	// etcd had ended the tenure by its arrival. A re-listing after the
	// break that missed the tenure may show its shard unchanged (no event
	// of that key), while it shows others'.
	if ch, ok := l.firstArrivalAtOrPastLocked(rEnd); ok && ch.At.Before(end) {
		return LockVerdict{Why: fmt.Sprintf("the tenure, which the lock watch never showed, ended at revision %d; the watch delivered rev %d (%s: %s) at %s, before the execution ended",
			rEnd, ch.Rev, ch.Shard, ch.who(), stamp(ch.At)), ByHistory: true}
	}
	return LockVerdict{Held: true, ByHistory: true}
}

// firstArrivalAtOrPastLocked returns the earliest-arriving event of any
// shard whose revision is at or past rev. Under mu.
func (l *LockTimeline) firstArrivalAtOrPastLocked(rev int64) (first LockChange, ok bool) {
	for _, evs := range l.log {
		for _, ch := range evs {
			if ch.Rev >= rev && (!ok || ch.At.Before(first.At)) {
				first, ok = ch, true
			}
		}
	}
	return first, ok
}

// Timeline describes every event of shard's lock the timeline holds, one
// a line, in arrival order: arrival, revision, holder@epoch or
// "released", and whether a re-listing showed it.
func (l *LockTimeline) Timeline(shard storage.ShardID) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.log[shard]) == 0 {
		return "(no event)"
	}
	var b strings.Builder
	for _, ch := range l.log[shard] {
		b.WriteString(ch.String())
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Describe describes every event of shard's lock in etcd's history, one a
// line: revision, put or delete, the lock's create revision (its epoch),
// its lease in hex and its holder.
func (h *LockHistory) Describe(shard storage.ShardID) string {
	evs := h.Shards[shard]
	var b strings.Builder
	if h.Compacted > 0 {
		fmt.Fprintf(&b, "(history compacted below revision %d)\n", h.Compacted)
	}
	if len(evs) == 0 {
		fmt.Fprintf(&b, "(no event up to revision %d)", h.Revision)
		return b.String()
	}
	for _, ev := range evs {
		kind := "put"
		if ev.Kind == storage.EventDelete {
			kind = "delete"
		}
		fmt.Fprintf(&b, "rev %d %s create_rev %d lease %x holder %s", ev.Revision, kind, ev.Lock.Epoch, ev.Lock.LeaseID, ev.Lock.RunnerID)
		if ev.Err != nil {
			fmt.Fprintf(&b, " (undecodable: %v)", ev.Err)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "(complete up to revision %d)", h.Revision)
	return b.String()
}
