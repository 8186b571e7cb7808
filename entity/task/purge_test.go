package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/memstore"
)

var shard0 = storage.ShardID{Group: storage.DefaultGroup, Index: 0}

// finish claims the task ref and ends it with end (Complete, Fail, ...),
// then writes it.
func (e *env) finish(t *testing.T, ref string, end func(*Task, time.Time) error) *Task {
	t.Helper()
	tk, etag := e.claim(t, ref, runnerA)
	if err := end(tk, e.clock.Now()); err != nil {
		t.Fatalf("finishing %s: %v", ref, err)
	}
	if _, err := e.store.Write(testCtx(t), tk, etag); err != nil {
		t.Fatalf("writing %s: %v", ref, err)
	}
	return tk
}

func complete(tk *Task, now time.Time) error { return tk.Complete(now, json.RawMessage(`{"ok":true}`)) }

func failPermanently(tk *Task, now time.Time) error {
	tk.Fail(now, errors.New("broken"), true)
	return nil
}

// taskKeys lists the task keys of shard 0, as S3 has them.
func (e *env) taskKeys(t *testing.T) []string { return e.keys(t, TaskPrefix(shard0)) }

// purgeWorld is one shard holding a task of every kind, all written at t0
// but for the young one, written an hour before the cutoff the tests use
// (now - 1h, with now = t0 + 2h).
type purgeWorld struct {
	completed, failed, cancelled, corrupt *Task // finished at t0
	pending, running                      *Task
	young                                 *Task // completed at t0+2h
	undecodable, malformed                string
}

func newPurgeWorld(t *testing.T, e *env) *purgeWorld {
	t.Helper()
	ctx := testCtx(t)
	w := &purgeWorld{}
	w.completed = e.finish(t, e.submit(t, SubmitRequest{Type: "job"}).Ref(), complete)
	w.failed = e.finish(t, e.submit(t, SubmitRequest{Type: "job", Entity: "e1"}).Ref(), failPermanently)
	c := e.submit(t, SubmitRequest{Type: "job", Delay: time.Hour})
	var err error
	if w.cancelled, err = e.cli.Cancel(ctx, c.Ref()); err != nil || w.cancelled.Status != Cancelled {
		t.Fatalf("Cancel: %v %+v", err, w.cancelled)
	}
	w.pending = e.submit(t, SubmitRequest{Type: "job", Delay: 48 * time.Hour})
	w.running, _ = e.claim(t, e.submit(t, SubmitRequest{Type: "job"}).Ref(), runnerA)

	// A task object an executor found corrupt and failed, its bytes kept.
	id := "corrupt-1"
	if _, err := e.mem.Put(ctx, TaskKey(shard0, id), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	bad, etag, err := e.store.Load(ctx, shard0, id)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load of a corrupt object: %v", err)
	}
	bad.MarkCorrupt(e.clock.Now(), err)
	if _, err := e.store.Write(ctx, bad, etag); err != nil {
		t.Fatal(err)
	}
	w.corrupt = bad
	// An object no executor has looked at: not known to be finished.
	w.undecodable = TaskKey(shard0, "undecodable-1")
	if _, err := e.mem.Put(ctx, w.undecodable, []byte("\x00\x01")); err != nil {
		t.Fatal(err)
	}
	w.malformed = TaskPrefix(shard0) + "notes.txt"
	if _, err := e.mem.Put(ctx, w.malformed, []byte("x")); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Hour)
	w.young = e.finish(t, e.submit(t, SubmitRequest{Type: "job"}).Ref(), complete)
	return w
}

// TestPurgeDeletesOldFinishedTasksOnly: of one shard holding every kind of
// task, Purge deletes exactly the finished ones that finished before the
// cutoff (the one marked corrupt included), whatever their status, and
// keeps pending, running and young finished tasks, objects that do not
// decode and keys that do not parse.
func TestPurgeDeletesOldFinishedTasksOnly(t *testing.T) {
	e := newEnv(t, 1)
	w := newPurgeWorld(t, e)
	ctx := testCtx(t)
	before := e.clock.Now().Add(-time.Hour)

	res, err := e.store.Purge(ctx, PurgeOptions{Shard: shard0, Before: before})
	if err != nil {
		t.Fatal(err)
	}
	want := PurgeResult{Scanned: 9, Read: 7, Completed: 1, Failed: 2, Cancelled: 1, Young: 1, Active: 2, Unreadable: 2}
	if res != want {
		t.Fatalf("Purge = %+v, want %+v", res, want)
	}
	got := e.taskKeys(t)
	wantKeys := []string{w.pending.Key(), w.running.Key(), w.young.Key(), w.undecodable, w.malformed}
	slices.Sort(wantKeys)
	if !slices.Equal(got, wantKeys) {
		t.Fatalf("task keys after Purge:\n%v\nwant\n%v", got, wantKeys)
	}

	// Again: nothing left to delete, and the unfinished and unreadable
	// versions are not read a second time when the caller keeps a memo.
	memo := NewPurgeMemo(0)
	if _, err := e.store.Purge(ctx, PurgeOptions{Shard: shard0, Before: before, Memo: memo}); err != nil {
		t.Fatal(err)
	}
	gets := e.mem.Calls(memstore.OpGet)
	res, err = e.store.Purge(ctx, PurgeOptions{Shard: shard0, Before: before, Memo: memo})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.mem.Calls(memstore.OpGet) - gets; n != 0 || res.Deleted() != 0 || res.Active != 2 || res.Unreadable != 2 {
		t.Fatalf("second pass with a memo: %d GETs, %+v; want none, 2 active, 2 unreadable", n, res)
	}
	// A version that changes is read again.
	tk, etag, err := e.store.Load(ctx, shard0, w.pending.ID)
	if err != nil {
		t.Fatal(err)
	}
	tk.RequestCancel(e.clock.Now())
	if _, err := e.store.Write(ctx, tk, etag); err != nil {
		t.Fatal(err)
	}
	res, err = e.store.Purge(ctx, PurgeOptions{Shard: shard0, Before: e.clock.Now().Add(time.Hour), Memo: memo})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cancelled != 1 || res.Completed != 1 || res.Active != 1 {
		t.Fatalf("after cancelling the pending task, a later cutoff: %+v; want it and the young one deleted", res)
	}
}

// TestPurgeStatusesAndDryRun: a dry run deletes nothing and counts what it
// would; Statuses narrows what goes; unfinished statuses and a missing
// cutoff are refused before any request.
func TestPurgeStatusesAndDryRun(t *testing.T) {
	e := newEnv(t, 1)
	w := newPurgeWorld(t, e)
	ctx := testCtx(t)
	before := e.clock.Now().Add(-time.Hour)
	all := e.taskKeys(t)

	res, err := e.store.Purge(ctx, PurgeOptions{Shard: shard0, Before: before, DryRun: true})
	if err != nil || res.Deleted() != 4 || res.Failed != 2 {
		t.Fatalf("dry run: %+v %v; want 4 (2 failed)", res, err)
	}
	if got := e.taskKeys(t); !slices.Equal(got, all) {
		t.Fatalf("a dry run deleted %v", slices.DeleteFunc(all, func(k string) bool { return slices.Contains(got, k) }))
	}
	if tk, _ := e.cli.Get(ctx, w.failed.Ref()); !tk.Purging.IsZero() {
		t.Fatalf("a dry run marked %s purging", tk.Ref())
	}

	res, err = e.store.Purge(ctx, PurgeOptions{Shard: shard0, Before: before, Statuses: []Status{Cancelled}})
	if err != nil || res.Cancelled != 1 || res.Deleted() != 1 || res.Filtered != 3 {
		t.Fatalf("Statuses [cancelled]: %+v %v; want 1 deleted, 3 filtered", res, err)
	}
	if _, err := e.cli.Get(ctx, w.cancelled.Ref()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("cancelled task after its purge: %v", err)
	}
	for _, tk := range []*Task{w.completed, w.failed} {
		if _, err := e.cli.Get(ctx, tk.Ref()); err != nil {
			t.Fatalf("%s (%s) after a purge of cancelled tasks: %v", tk.Ref(), tk.Status, err)
		}
	}

	for _, bad := range []PurgeOptions{
		{Shard: shard0, Before: before, Statuses: []Status{Completed, Pending}},
		{Shard: shard0, Before: before, Statuses: []Status{Running}},
		{Shard: shard0},
		{Shard: storage.ShardID{Group: "no/such", Index: 0}, Before: before},
	} {
		calls := e.mem.CallCounts()
		_, err := e.store.Purge(ctx, bad)
		var ve *ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
			t.Fatalf("Purge(%+v) = %v, want a *ValidationError", bad, err)
		}
		if after := e.mem.CallCounts(); after[memstore.OpList] != calls[memstore.OpList] {
			t.Fatalf("Purge(%+v) listed before refusing", bad)
		}
	}
}

// checkThenDelete is an object store whose conditional delete is not
// atomic, as VersityGW v1.8.0's is not: it checks the ETag, calls between,
// then removes whatever the key holds.
type checkThenDelete struct {
	storage.ObjectStore
	between func(key string)
}

func (s checkThenDelete) DeleteIfMatch(ctx context.Context, key, ifMatch string) error {
	info, err := s.Head(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.ETag != ifMatch {
		return fmt.Errorf("%w: ETag is %s, not %s", storage.ErrPrecondition, info.ETag, ifMatch)
	}
	s.between(key)
	return s.Delete(ctx, key)
}

// TestPurgeNeverUndoesAReplay: a failed task replayed between the purge's
// read and its delete stays (pending, as replayed); one replayed after the
// purge has marked it is refused with ErrPurging and goes, also when the
// replay comes between a non-atomic conditional delete's check and its
// removal. Either way the replay's caller is told the truth.
func TestPurgeNeverUndoesAReplay(t *testing.T) {
	for _, when := range []string{"after the read", "after the mark", "inside a non-atomic delete"} {
		t.Run(when, func(t *testing.T) {
			e := newEnv(t, 1)
			ctx := testCtx(t)
			failed := e.finish(t, e.submit(t, SubmitRequest{Type: "job"}).Ref(), failPermanently)
			e.clock.Advance(2 * time.Hour)
			var fired atomic.Bool
			var replayed *Task
			var replayErr error
			replay := func(ctx context.Context) {
				if fired.CompareAndSwap(false, true) {
					replayed, replayErr = e.cli.Replay(ctx, failed.Ref())
				}
			}
			e.mem.SetHook(func(ctx context.Context, c memstore.Call) error {
				if c.Key == failed.Key() && ((when == "after the read" && c.Op == memstore.OpGet && c.When == memstore.AfterApply) ||
					(when == "after the mark" && c.Op == memstore.OpDelete && c.When == memstore.BeforeApply)) {
					replay(ctx)
				}
				return nil
			})
			purger := e.store
			if when == "inside a non-atomic delete" {
				purger = NewStore(checkThenDelete{e.mem, func(string) { replay(ctx) }}, WithClock(e.clock.ServerTime))
			}
			res, err := purger.Purge(ctx, PurgeOptions{Shard: shard0, Before: e.clock.Now().Add(-time.Hour)})
			e.mem.SetHook(nil)
			if err != nil || !fired.Load() {
				t.Fatalf("Purge: %v (hook fired: %v)", err, fired.Load())
			}
			cur, gerr := e.cli.Get(ctx, failed.Ref())
			if replayErr == nil && (gerr != nil || cur.Status != Pending) {
				t.Fatalf("Replay said %s is pending again, but after the purge it is %v (%v): the purge undid the replay", failed.Ref(), cur, gerr)
			}
			switch when {
			case "after the read":
				if replayErr != nil || replayed.Status != Pending {
					t.Fatalf("Replay: %v %+v", replayErr, replayed)
				}
				if gerr != nil || cur.Status != Pending || !cur.Purging.IsZero() || res.Changed != 1 || res.Deleted() != 0 {
					t.Fatalf("the replayed task after the purge: %v %+v; purge %+v", gerr, cur, res)
				}
				if ptrs, _, err := e.store.ListPointers(ctx, shard0, "", 0); err != nil || !slices.ContainsFunc(ptrs, func(p Pointer) bool { return p.Key == cur.PointerKey() }) {
					t.Fatalf("the replayed task's pointer: %v %v", ptrs, err)
				}
			default:
				if !errors.Is(replayErr, ErrPurging) {
					t.Fatalf("Replay of a task being purged: %v, want ErrPurging", replayErr)
				}
				if !errors.Is(gerr, ErrNotFound) || res.Failed != 1 {
					t.Fatalf("the task after the purge: %v; purge %+v", gerr, res)
				}
				if ptrs, _, _ := e.store.ListPointers(ctx, shard0, "", 0); len(ptrs) != 1 {
					// Submit's pointer is the one left (the executor
					// deletes a finished task's); the refused replay's
					// must not be.
					t.Fatalf("pointers after a refused replay: %v", ptrs)
				}
			}
		})
	}
}

// TestPurgeBoundsAndResume: a call reads at most MaxReads objects and lists
// at most MaxScan keys, and its Next resumes where it stopped until every
// old task is gone.
func TestPurgeBoundsAndResume(t *testing.T) {
	e := newEnv(t, 1)
	ctx := testCtx(t)
	for i := 0; i < 25; i++ {
		e.finish(t, e.submit(t, SubmitRequest{Type: "job"}).Ref(), complete)
	}
	e.clock.Advance(2 * time.Hour)
	before := e.clock.Now().Add(-time.Hour)
	for _, c := range []struct {
		o     PurgeOptions
		calls int
	}{{PurgeOptions{MaxReads: 10}, 3}, {PurgeOptions{MaxScan: 7}, 4}} {
		o, calls, total := c.o, 0, 0
		o.Shard, o.Before = shard0, before
		o.DryRun = true
		for {
			res, err := e.store.Purge(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			calls++
			total += res.Deleted()
			if (o.MaxReads > 0 && res.Read > o.MaxReads) || (o.MaxScan > 0 && res.Scanned > o.MaxScan) {
				t.Fatalf("%+v: one call did %+v", o, res)
			}
			if res.Next == "" {
				break
			}
			o.After = res.Next
		}
		if total != 25 || calls != c.calls {
			t.Fatalf("%+v: %d calls found %d to delete; want %d calls, 25", c.o, calls, total, c.calls)
		}
	}
	res, err := e.store.Purge(ctx, PurgeOptions{Shard: shard0, Before: before, MaxReads: 10})
	if err != nil || res.Completed != 10 || res.Next == "" {
		t.Fatalf("bounded purge: %+v %v", res, err)
	}
	if n := len(e.taskKeys(t)); n != 15 {
		t.Fatalf("%d task objects after deleting 10 of 25", n)
	}
}

// v7 returns a caller-given id shaped as a UUIDv7 stamped at t.
func v7(t time.Time, n int) string {
	return fmt.Sprintf("%s-7000-8000-%012x", uuidV7Prefix(t), n)
}

// TestPurgeSkipsYoungUUIDv7s: with SkipYoungIDs, the listing stops reading
// UUIDv7 keys at the first one stamped after the cutoff and jumps past
// those stamped up to now: a shard full of young tasks costs two LISTs,
// not one per thousand tasks. Caller-given ids that sort after the UUIDv7s
// are still purged.
func TestPurgeSkipsYoungUUIDv7s(t *testing.T) {
	e := newEnv(t, 1)
	ctx := testCtx(t)
	for i := 0; i < 3; i++ {
		e.finish(t, e.submit(t, SubmitRequest{Type: "job", ID: v7(e.clock.Now(), i)}).Ref(), complete)
	}
	for _, id := range []string{"order-1", "order-2"} {
		e.finish(t, e.submit(t, SubmitRequest{Type: "job", ID: id}).Ref(), complete)
	}
	e.clock.Advance(2 * time.Hour)
	const young = 2500
	for i := 0; i < young; i++ {
		e.submit(t, SubmitRequest{Type: "job", ID: v7(e.clock.Now(), i)})
	}
	before := e.clock.Now().Add(-time.Hour)
	lists := func(o PurgeOptions) (int, PurgeResult) {
		t.Helper()
		n := e.mem.Calls(memstore.OpList)
		res, err := e.store.Purge(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return e.mem.Calls(memstore.OpList) - n, res
	}
	n, res := lists(PurgeOptions{Shard: shard0, Before: before, DryRun: true})
	if n != 3 || res.Scanned != young+5 || res.Deleted() != 5 {
		t.Fatalf("full scan: %d LISTs, %+v; want 3 LISTs, 5 to delete", n, res)
	}
	n, res = lists(PurgeOptions{Shard: shard0, Before: before, SkipYoungIDs: true})
	if n != 2 || res.Completed != 5 || res.Scanned >= young {
		t.Fatalf("skipping young ids: %d LISTs, %+v; want 2 LISTs, 5 deleted", n, res)
	}
	if keys := e.taskKeys(t); len(keys) != young || slices.ContainsFunc(keys, func(k string) bool { return !slices.Contains([]byte("0123456789abcdef"), k[len(TaskPrefix(shard0))]) }) {
		t.Fatalf("%d task keys left, want the %d young ones", len(keys), young)
	}
}

func TestUUIDv7Time(t *testing.T) {
	before := time.Now().Add(-time.Millisecond)
	at, ok := uuidV7Time(NewID())
	if !ok || at.Before(before.Truncate(time.Millisecond)) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("uuidV7Time(NewID()) = %s, %v; want about now", at, ok)
	}
	stamp := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	if at, ok := uuidV7Time(v7(stamp, 1)); !ok || !at.Equal(stamp) {
		t.Fatalf("uuidV7Time(v7(%s)) = %s %v", stamp, at, ok)
	}
	for _, id := range []string{"order-1", "0192f3a4-5b6c-4d7e-8f90-123456789abc", "0192F3A4-5B6C-7D7E-8F90-123456789ABC", "0192f3a4-5b6c-7d7e-cf90-123456789abc", "0192f3a45b6c7d7e8f90123456789abc"} {
		if _, ok := uuidV7Time(id); ok {
			t.Errorf("uuidV7Time(%q) took it for a UUIDv7", id)
		}
	}
}

// TestMarkPurging: only finished tasks can be marked; a marked task keeps
// its status, refuses Replay with ErrPurging, and stays valid; Purging on
// an unfinished task is invalid.
func TestMarkPurging(t *testing.T) {
	e := newEnv(t, 1)
	pending := e.submit(t, SubmitRequest{Type: "job"})
	if err := pending.Clone().MarkPurging(t0); !errors.Is(err, ErrInvalidTransition) {
		t.Fatalf("MarkPurging of a pending task: %v", err)
	}
	failed := e.finish(t, e.submit(t, SubmitRequest{Type: "job"}).Ref(), failPermanently)
	if err := failed.MarkPurging(t0); err != nil || !failed.Purging.Equal(t0) || failed.Status != Failed ||
		failed.History[len(failed.History)-1].Event != EventPurging {
		t.Fatalf("MarkPurging: %v %+v", err, failed)
	}
	if err := failed.Validate(); err != nil {
		t.Fatalf("a marked task does not validate: %v", err)
	}
	if err := failed.Clone().Replay(t0); !errors.Is(err, ErrPurging) {
		t.Fatalf("Replay of a marked task: %v, want ErrPurging", err)
	}
	bad := pending.Clone()
	bad.Purging = t0
	var ve *ValidationError
	if err := bad.Validate(); !errors.As(err, &ve) || ve.Field != "purging" {
		t.Fatalf("a pending task marked purging validates: %v", err)
	}
}
