package task

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Purge limits.
const (
	// DefaultPurgeScan bounds the task keys one Purge call lists: ten LIST
	// pages.
	DefaultPurgeScan = 10 * storage.MaxListLimit
	// DefaultPurgeReads bounds the task objects one Purge call reads, and
	// so deletes.
	DefaultPurgeReads = 1000
	// DefaultPurgeConcurrency is how many objects one Purge call reads and
	// deletes at a time.
	DefaultPurgeConcurrency = 4
	// DefaultPurgeMemo is the size NewPurgeMemo gives a memo asked for none.
	DefaultPurgeMemo = 10000
)

const (
	// lastModifiedResolution: S3 reports LastModified truncated to the
	// second, so a write happened up to this much after it.
	lastModifiedResolution = time.Second
	// idClockMargin: a UUIDv7 stamped less than this after the cutoff is
	// still listed, so that a submitter whose clock runs ahead of S3's by
	// less does not have its tasks skipped (SkipYoungIDs).
	idClockMargin = time.Minute
	// idJumpAhead: past the first young UUIDv7, the listing resumes after
	// the ids stamped up to this long after now.
	idJumpAhead = time.Hour
)

// PurgeOptions select what Purge deletes from one shard.
type PurgeOptions struct {
	// Shard is the shard to purge.
	Shard storage.ShardID
	// Before is the cutoff, an S3 time: only tasks that finished before it
	// are deleted. Required. The retention sweep passes the earliest the S3
	// clock may read now, minus the retention.
	Before time.Time
	// Statuses narrows the finished statuses deleted; nil or empty means
	// all three (completed, failed, cancelled). Pending or running is
	// refused with a *ValidationError.
	Statuses []Status
	// DryRun reads and counts, and deletes nothing.
	DryRun bool
	// After resumes a scan: the previous call's PurgeResult.Next.
	After string
	// MaxScan bounds the keys listed (0: DefaultPurgeScan); MaxReads the
	// objects read, and so deleted (0: DefaultPurgeReads). A call that
	// reaches either returns a Next to resume from.
	MaxScan, MaxReads int
	// Concurrency is how many objects are read and deleted at a time (0:
	// DefaultPurgeConcurrency).
	Concurrency int
	// SkipYoungIDs stops listing the UUIDv7 ids stamped after Before: they
	// sort by creation time, so past the first one the listing jumps ahead
	// of the ids stamped up to an hour after now and goes on with what
	// sorts after them (caller-given ids, clocks far ahead). A task cannot
	// finish before it is created, so nothing deletable is skipped but (a)
	// tasks of submitters whose clock runs over a minute ahead of S3's, and
	// (b) caller-given ids whose first 12 hex digits happen to read as a
	// time in the skipped span; both are deleted by a later call, once the
	// cutoff has passed them. For a repeated sweep, where that delay is
	// harmless and listing young tasks every pass is not; a one-off purge
	// lists everything.
	SkipYoungIDs bool
	// Memo, optional, carries what earlier calls on this shard read and
	// found not deletable (see PurgeMemo).
	Memo *PurgeMemo
}

// PurgeResult counts what one Purge call did. Every key listed is counted
// once, as deleted or kept: Scanned = Deleted() + Kept().
type PurgeResult struct {
	Scanned int // task keys listed
	Read    int // task objects read (GET)
	// Completed, Failed and Cancelled count the tasks deleted, by status
	// (in a dry run, those that would have been).
	Completed, Failed, Cancelled int
	// Kept, by reason:
	Young      int // last written at or after Before
	Active     int // pending or running
	Filtered   int // finished, in a status not asked for
	Unreadable int // does not decode, too large to read, or a key that does not parse
	Changed    int // changed (a replay) or vanished between listing and deleting
	// Next is where the next call resumes (PurgeOptions.After); "" once
	// the shard's last key has been scanned.
	Next string
}

// Deleted is the number of tasks deleted (or, in a dry run, that would be).
func (r PurgeResult) Deleted() int { return r.Completed + r.Failed + r.Cancelled }

// Kept is the number of keys listed and not deleted.
func (r PurgeResult) Kept() int { return r.Young + r.Active + r.Filtered + r.Unreadable + r.Changed }

// Add adds o's counts to r (Next is left alone), to total several calls.
func (r *PurgeResult) Add(o PurgeResult) {
	r.Scanned += o.Scanned
	r.Read += o.Read
	r.Completed += o.Completed
	r.Failed += o.Failed
	r.Cancelled += o.Cancelled
	r.Young += o.Young
	r.Active += o.Active
	r.Filtered += o.Filtered
	r.Unreadable += o.Unreadable
	r.Changed += o.Changed
}

// PurgeMemo remembers, across Purge calls on one shard, the versions read
// and found not deletable for as long as they do not change: unfinished
// tasks and unreadable objects. Purge does not read them again while their
// listed ETag is the one remembered, so that tasks scheduled further ahead
// than the retention, or left pending for a type no runner handles, cost
// no GET per pass. It holds at most its size in entries and forgets them
// all when full. It is safe for concurrent use.
type PurgeMemo struct {
	mu   sync.Mutex
	max  int
	seen map[string]memoEntry
}

type memoEntry struct {
	etag   string
	active bool // pending or running; else unreadable
}

// NewPurgeMemo returns a memo of at most size entries (< 1:
// DefaultPurgeMemo).
func NewPurgeMemo(size int) *PurgeMemo {
	if size < 1 {
		size = DefaultPurgeMemo
	}
	return &PurgeMemo{max: size, seen: map[string]memoEntry{}}
}

// Len returns the number of versions remembered.
func (m *PurgeMemo) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

func (m *PurgeMemo) lookup(key, etag string) (memoEntry, bool) {
	if m == nil {
		return memoEntry{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.seen[key]
	if ok && e.etag != etag {
		delete(m.seen, key)
		return memoEntry{}, false
	}
	return e, ok
}

func (m *PurgeMemo) remember(key, etag string, active bool) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.seen) >= m.max {
		clear(m.seen)
	}
	m.seen[key] = memoEntry{etag: etag, active: active}
}

// Purge deletes one shard's finished tasks that finished before
// o.Before. The shard owner's retention sweep and `tenure task purge` both
// run it, so they share one rule:
//
//   - The shard's task objects are listed in key order; only those whose
//     LastModified (plus its one-second resolution) is before Before are
//     read: a task last written later cannot have finished before it.
//   - A task is deleted only if it is finished (completed, failed or
//     cancelled, and in o.Statuses) and both its updated_at and its
//     LastModified are before Before: the S3 server's own clock decides,
//     and the writer's estimate of it too, whichever is later. Pending and
//     running tasks are kept, and so are objects that do not decode and
//     keys that do not parse: only what is known to be finished goes.
//     Failed tasks marked corrupt by an executor (their raw bytes kept)
//     are failed tasks and go with them.
//   - A completed task, or one marked corrupt or already marked Purging,
//     is never written again by anyone (nothing reopens it), so it is
//     deleted with DeleteIfMatch on the ETag read. A failed or cancelled
//     task can be replayed at any moment (Client.Replay), so it is first
//     marked Purging by compare-and-swap on the ETag read, and only then
//     deleted. A replay that wrote first makes the mark lose, and the task
//     is kept; a replay that reads the mark refuses (ErrPurging). A replay
//     is thus never undone, and the argument needs nothing but atomic
//     conditional PUTs: not an atomic conditional DELETE, which VersityGW
//     v1.8.0 lacks (see storage.ObjectStore.DeleteIfMatch), and with which
//     a delete could remove a replay published between its check and its
//     unlink. Tasks are thus deleted only in a version nobody may change.
//     (A task left marked by a call interrupted between its two requests
//     was last written by the mark: a later call deletes it once the mark
//     is older than its cutoff.)
//
// Cost: one LIST per 1000 keys listed; one GET per task read; one DELETE
// per completed task deleted; one PUT and one DELETE per failed or
// cancelled task deleted. A store error ends the call: it returns the
// counts so far, an empty Next and the error (start again from o.After).
func (s *Store) Purge(ctx context.Context, o PurgeOptions) (PurgeResult, error) {
	if err := o.validate(); err != nil {
		return PurgeResult{}, err
	}
	maxScan, maxReads, conc := o.MaxScan, o.MaxReads, o.Concurrency
	if maxScan <= 0 {
		maxScan = DefaultPurgeScan
	}
	if maxReads <= 0 {
		maxReads = DefaultPurgeReads
	}
	if conc <= 0 {
		conc = DefaultPurgeConcurrency
	}
	now, err := s.Now(ctx)
	if err != nil {
		return PurgeResult{}, err
	}
	p := &purge{s: s, o: o, now: now}
	p.ctx, p.cancel = context.WithCancel(ctx)
	defer p.cancel()
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup

	prefix := TaskPrefix(o.Shard)
	after, reads, done := o.After, 0, false
	scanned := 0
list:
	for scanned < maxScan {
		page, err := s.obj.List(p.ctx, prefix, storage.ListOptions{StartAfter: after, Limit: min(storage.MaxListLimit, maxScan-scanned)})
		if err != nil {
			p.fail(fmt.Errorf("task: purge: list %s: %w", prefix, err))
			break
		}
		jump := ""
		for _, obj := range page.Objects {
			candidate, id := p.triage(obj)
			if candidate && reads == maxReads {
				break list // this key is the next call's
			}
			after = obj.Key
			scanned++
			if o.SkipYoungIDs && jump == "" && p.youngID(id) {
				jump = prefix + uuidV7Prefix(now.Latest().Add(idJumpAhead)) + "~"
			}
			if !candidate {
				continue
			}
			reads++
			select {
			case sem <- struct{}{}:
			case <-p.ctx.Done():
				break list
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				p.examine(obj, id)
			}()
		}
		if !page.Truncated || len(page.Objects) == 0 {
			done = true
			break
		}
		if jump > after {
			// Every key up to the jump is a UUIDv7 stamped after the cutoff,
			// or a rare caller-given id a later call gets (see SkipYoungIDs).
			after = jump
		}
	}
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.res.Scanned = scanned
	if p.err != nil {
		return p.res, p.err
	}
	if !done {
		p.res.Next = after
	}
	return p.res, nil
}

func (o PurgeOptions) validate() error {
	if err := ValidateGroup(o.Shard.Group); err != nil {
		return err
	}
	if o.Shard.Index < 0 {
		return &ValidationError{Field: "PurgeOptions.Shard", Value: o.Shard.String(), Rule: "index must not be negative"}
	}
	if o.Before.IsZero() {
		return &ValidationError{Field: "PurgeOptions.Before", Rule: "is required: the S3 time tasks must have finished before"}
	}
	for _, st := range o.Statuses {
		if !st.IsTerminal() {
			return &ValidationError{Field: "PurgeOptions.Statuses", Value: strconv.Quote(string(st)),
				Rule: "only finished tasks (completed, failed, cancelled) are purged"}
		}
	}
	return nil
}

// purge is one Purge call's shared state.
type purge struct {
	s      *Store
	o      PurgeOptions
	now    storage.ServerTime
	ctx    context.Context
	cancel context.CancelFunc

	mu  sync.Mutex
	res PurgeResult
	err error // the first store error; it ends the call
}

func (p *purge) count(f func(r *PurgeResult)) {
	p.mu.Lock()
	f(&p.res)
	p.mu.Unlock()
}

func (p *purge) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.cancel()
}

// triage sorts a listed key without reading it: it counts what it can
// decide (a malformed key, a task written too recently, a version the memo
// knows) and reports whether the object must be read.
func (p *purge) triage(obj storage.ObjectInfo) (candidate bool, id string) {
	shard, id, err := ParseTaskKey(obj.Key)
	switch {
	case err != nil || shard != p.o.Shard:
		p.count(func(r *PurgeResult) { r.Unreadable++ })
		return false, ""
	case !obj.LastModified.Add(lastModifiedResolution).Before(p.o.Before):
		p.count(func(r *PurgeResult) { r.Young++ })
		return false, id
	}
	if m, ok := p.o.Memo.lookup(obj.Key, obj.ETag); ok {
		p.count(func(r *PurgeResult) {
			if m.active {
				r.Active++
			} else {
				r.Unreadable++
			}
		})
		return false, id
	}
	return true, id
}

// youngID reports whether id is a UUIDv7 stamped after the cutoff (with
// the clock margin).
func (p *purge) youngID(id string) bool {
	at, ok := uuidV7Time(id)
	return ok && at.After(p.o.Before.Add(idClockMargin))
}

// examine reads one old enough object and deletes it if the rule says so.
func (p *purge) examine(info storage.ObjectInfo, id string) {
	ctx := p.ctx
	obj, err := p.s.obj.Get(ctx, info.Key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		p.count(func(r *PurgeResult) { r.Changed++ })
		return
	case errors.Is(err, storage.ErrTooLarge):
		p.count(func(r *PurgeResult) { r.Read++; r.Unreadable++ })
		p.o.Memo.remember(info.Key, info.ETag, false)
		return
	case err != nil:
		p.fail(fmt.Errorf("task: purge: read %s: %w", info.Key, err))
		return
	}
	p.count(func(r *PurgeResult) { r.Read++ })
	t, err := decode(info.Key, p.o.Shard, id, obj.Body)
	if err != nil {
		p.count(func(r *PurgeResult) { r.Unreadable++ })
		p.o.Memo.remember(info.Key, obj.ETag, false)
		return
	}
	p.s.Configure(t)
	finished := obj.LastModified.Add(lastModifiedResolution)
	if t.UpdatedAt.After(finished) {
		finished = t.UpdatedAt
	}
	switch {
	case !t.Status.IsTerminal():
		p.count(func(r *PurgeResult) { r.Active++ })
		p.o.Memo.remember(info.Key, obj.ETag, true)
		return
	case len(p.o.Statuses) > 0 && !slices.Contains(p.o.Statuses, t.Status):
		p.count(func(r *PurgeResult) { r.Filtered++ })
		return
	case !finished.Before(p.o.Before):
		p.count(func(r *PurgeResult) { r.Young++ })
		return
	case p.o.DryRun:
		p.deleted(t.Status)
		return
	}
	etag := obj.ETag
	if t.Purging.IsZero() && t.Corrupt == "" && (t.Status == Failed || t.Status == Cancelled) {
		// Replayable: take it out of Replay's reach first (see Purge).
		if err := t.MarkPurging(p.now.Now); err != nil {
			p.fail(err)
			return
		}
		etag, err = p.s.Write(ctx, t, etag)
		if errors.Is(err, storage.ErrPrecondition) {
			p.count(func(r *PurgeResult) { r.Changed++ }) // replayed meanwhile
			return
		}
		if err != nil {
			p.fail(fmt.Errorf("task: purge: mark %s: %w", t.Ref(), err))
			return
		}
	}
	err = p.s.obj.DeleteIfMatch(ctx, info.Key, etag)
	switch {
	case errors.Is(err, storage.ErrPrecondition):
		p.count(func(r *PurgeResult) { r.Changed++ })
	case err != nil:
		p.fail(fmt.Errorf("task: purge: delete %s: %w", t.Ref(), err))
	default:
		p.deleted(t.Status)
	}
}

func (p *purge) deleted(st Status) {
	p.count(func(r *PurgeResult) {
		switch st {
		case Completed:
			r.Completed++
		case Failed:
			r.Failed++
		case Cancelled:
			r.Cancelled++
		}
	})
}

// uuidV7Time returns the time stamped in a UUIDv7 in the lowercase
// 8-4-4-4-12 form NewID makes, and whether id is one.
func uuidV7Time(id string) (time.Time, bool) {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' ||
		id[14] != '7' || (id[19] != '8' && id[19] != '9' && id[19] != 'a' && id[19] != 'b') {
		return time.Time{}, false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c != '-' && (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return time.Time{}, false
		}
	}
	ms, err := strconv.ParseUint(id[0:8]+id[9:13], 16, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(ms)).UTC(), true
}

// uuidV7Prefix returns the first 13 characters ("xxxxxxxx-xxxx") of the
// UUIDv7s stamped in t's millisecond.
func uuidV7Prefix(t time.Time) string {
	ms := uint64(max(t.UnixMilli(), 0)) & (1<<48 - 1)
	return fmt.Sprintf("%08x-%04x", ms>>16, ms&0xffff)
}
