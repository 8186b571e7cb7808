package task

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/memstore"
)

// newTask returns a pending task as Submit would build it, for Store tests.
func (e *env) newTask(id string) *Task {
	t := pendingTask()
	t.ID = id
	t.AvailableAt, t.CreatedAt = e.clock.Now(), e.clock.Now()
	t.Rev = 0
	return t
}

func TestStoreCreateLoadWrite(t *testing.T) {
	e := newEnv(t, 8)
	ctx := testCtx(t)
	tk := e.newTask("t1")
	etag1, err := e.store.Create(ctx, tk)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if tk.Rev != 1 || !tk.UpdatedAt.Equal(t0) {
		t.Fatalf("after Create: rev %d updated %s", tk.Rev, tk.UpdatedAt)
	}
	got, etag, err := e.store.Load(ctx, tk.Shard, tk.ID)
	if err != nil || etag != etag1 {
		t.Fatalf("Load: %v, etag %s want %s", err, etag, etag1)
	}
	if !reflect.DeepEqual(got, func() *Task { c := tk.Clone(); e.store.Configure(c); return c }()) {
		t.Fatalf("Load returned\n%+v\nwant\n%+v", got, tk)
	}
	// Every write increments Rev and so changes the ETag, even a write that
	// changes nothing else.
	etags := map[string]bool{etag1: true}
	for want := int64(2); want <= 4; want++ {
		e.clock.Advance(time.Second)
		etag, err = e.store.Write(ctx, got, etag)
		if err != nil {
			t.Fatalf("Write rev %d: %v", want, err)
		}
		if got.Rev != want || !got.UpdatedAt.Equal(e.clock.Now()) || etags[etag] {
			t.Fatalf("after write: rev %d (want %d), updated %s, etag %s reused %v", got.Rev, want, got.UpdatedAt, etag, etags[etag])
		}
		etags[etag] = true
	}
	again, _, _ := e.store.Load(ctx, tk.Shard, tk.ID)
	if again.Rev != 4 || !again.CreatedAt.Equal(t0) {
		t.Fatalf("stored rev %d created %s", again.Rev, again.CreatedAt)
	}
	// Creating it again loses.
	if _, err := e.store.Create(ctx, e.newTask("t1")); !errors.Is(err, ErrExists) || !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("second Create: %v, want ErrExists and storage.ErrPrecondition", err)
	}
}

func TestStoreWriteConflict(t *testing.T) {
	e := newEnv(t, 8)
	ctx := testCtx(t)
	tk := e.newTask("t1")
	if _, err := e.store.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	// Two runners read the same version and both claim it: one wins.
	a, etagA, _ := e.store.Load(ctx, tk.Shard, tk.ID)
	b, etagB, _ := e.store.Load(ctx, tk.Shard, tk.ID)
	a.ClaimFor(t0, runnerA)
	b.ClaimFor(t0, runnerB)
	if _, err := e.store.Write(ctx, a, etagA); err != nil {
		t.Fatalf("first writer: %v", err)
	}
	bBefore := b.Clone()
	if _, err := e.store.Write(ctx, b, etagB); !errors.Is(err, storage.ErrPrecondition) || !strings.Contains(err.Error(), tk.Key()) {
		t.Fatalf("second writer: %v, want storage.ErrPrecondition naming the key", err)
	}
	if !reflect.DeepEqual(b, bBefore) {
		t.Fatal("a lost write changed the caller's task")
	}
	cur, _, _ := e.store.Load(ctx, tk.Shard, tk.ID)
	if !cur.HeldBy(runnerA) || cur.Rev != 2 {
		t.Fatalf("stored claim %+v rev %d, want runner A's at rev 2", cur.Claim, cur.Rev)
	}
	// A vanished object is a lost race too.
	e.mem.Delete(ctx, tk.Key())
	if _, err := e.store.Write(ctx, cur, "\"etag\""); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("Write of a deleted task: %v", err)
	}
}

func TestStoreWriteRefusals(t *testing.T) {
	e := newEnv(t, 8)
	tk := e.newTask("t1")
	etag, err := e.store.Create(testCtx(t), tk)
	if err != nil {
		t.Fatal(err)
	}
	e.mem.ResetCalls()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.store.Write(ctx, tk, etag); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write with a cancelled context: %v", err)
	}
	if _, err := e.store.Create(ctx, e.newTask("t2")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with a cancelled context: %v", err)
	}
	if _, err := e.store.Write(testCtx(t), tk, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Write without an etag: %v", err)
	}
	bad := tk.Clone()
	bad.Status = "weird"
	if _, err := e.store.Write(testCtx(t), bad, etag); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Write of an invalid task: %v", err)
	}
	if n := e.mem.Calls(memstore.OpReplace) + e.mem.Calls(memstore.OpCreate); n != 0 {
		t.Fatalf("refused writes made %d requests", n)
	}
	if _, _, err := e.store.Load(testCtx(t), tk.Shard, "bad.id"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Load of a bad id: %v", err)
	}
	_, _, err = e.store.Load(testCtx(t), tk.Shard, "missing")
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), "default/3/missing") {
		t.Fatalf("Load of a missing task: %v", err)
	}
}

func TestStoreHistoryLimit(t *testing.T) {
	e := newEnv(t, 8, WithHistoryLimit(4))
	ctx := testCtx(t)
	tk := e.newTask("t1")
	for range 6 {
		tk.History = append(tk.History, Transition{At: t0, Event: EventRequeued})
	}
	etag, err := e.store.Create(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	got, etag, _ := e.store.Load(ctx, tk.Shard, tk.ID)
	if len(got.History) != 4 || got.HistoryDropped != 3 {
		t.Fatalf("stored %d entries, %d dropped; want 4 and 3", len(got.History), got.HistoryDropped)
	}
	got.ClaimFor(t0, runnerA)
	got.Requeue(t0, "x")
	if len(got.History) != 4 || got.HistoryDropped != 5 {
		t.Fatalf("loaded task trims to %d (dropped %d); want the store's limit 4", len(got.History), got.HistoryDropped)
	}
	if _, err := e.store.Write(ctx, got, etag); err != nil {
		t.Fatal(err)
	}
	if NewStore(e.mem, WithHistoryLimit(0), WithMaxInputSize(-1)).Options() != DefaultOptions() {
		t.Fatal("out-of-range options were not ignored")
	}
	if err := (Options{MaxInputSize: 1, HistoryLimit: 0}).Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "HistoryLimit") {
		t.Fatalf("Options.Validate: %v", err)
	}
}

// TestStoreRandSeeds: the jitter source is the store's, so a seeded one
// gives repeatable retry times.
func TestStoreRandSeeds(t *testing.T) {
	retryAt := func(seed uint64) []time.Time {
		e := newEnv(t, 8, WithRand(rand.NewPCG(seed, seed)))
		ctx := testCtx(t)
		tk := e.newTask("t1")
		tk.MaxAttempts = 20
		tk.Retry.Jitter = 0.5
		e.store.Create(ctx, tk)
		var out []time.Time
		for range 10 {
			got, _, _ := e.store.Load(ctx, tk.Shard, tk.ID)
			got.ClaimFor(got.AvailableAt, runnerA)
			at, _ := got.Fail(got.AvailableAt, errors.New("x"), false)
			out = append(out, at)
			tk = got
			e.store.Configure(tk)
			etag, _ := e.store.Objects().Head(ctx, tk.Key())
			e.store.Write(ctx, tk, etag.ETag)
		}
		return out
	}
	a, b, c := retryAt(1), retryAt(1), retryAt(2)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different retry times:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds, same retry times")
	}
}

func TestStoreLoadCorrupt(t *testing.T) {
	e := newEnv(t, 8)
	ctx := testCtx(t)
	shard := storage.ShardID{Group: "default", Index: 3}
	other := e.newTask("other")
	otherBody, _ := json.Marshal(other)
	invalid := e.newTask("t1")
	invalid.Status = "weird"
	invalidBody, _ := json.Marshal(invalid)
	big := append([]byte(`{"x":"`), bytes.Repeat([]byte("y"), 100<<10)...)
	cases := []struct {
		name     string
		body     []byte
		encoding string
		keep     []byte // the bytes Corrupt must give back
	}{
		{"not JSON", []byte(`{"id": "t1", "status": `), CorruptText, []byte(`{"id": "t1", "status": `)},
		{"binary", []byte{0xff, 0x00, 0xfe, 'x'}, CorruptBase64, []byte{0xff, 0x00, 0xfe, 'x'}},
		{"invalid task", invalidBody, CorruptText, invalidBody},
		{"another task's body", otherBody, CorruptText, otherBody},
		{"empty", []byte{}, CorruptNone, nil},
		{"huge", big, CorruptText, big[:MaxCorruptKeep]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := TaskKey(shard, "t1")
			stored, err := e.mem.Put(ctx, key, c.body)
			if err != nil {
				t.Fatal(err)
			}
			tk, etag, err := e.store.Load(ctx, shard, "t1")
			var ce *CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.Is(err, storage.ErrCorrupt) || !errors.As(err, &ce) || ce.Key != key || !strings.Contains(err.Error(), key) {
				t.Fatalf("Load: %v, want a *CorruptError naming %s", err, key)
			}
			if tk == nil || tk.ID != "t1" || tk.Shard != shard || etag != stored {
				t.Fatalf("Load returned task %+v etag %s; want the partial task and etag %s", tk, etag, stored)
			}
			if tk.CorruptEncoding != c.encoding || !bytes.Equal(tk.CorruptBytes(), c.keep) || tk.CorruptSize != int64(len(c.body)) {
				t.Fatalf("kept %d bytes as %q (size %d), want %d bytes as %q", len(tk.CorruptBytes()), tk.CorruptEncoding, tk.CorruptSize, len(c.keep), c.encoding)
			}
			// The caller fails it in place, keeping the bytes.
			if err := tk.MarkCorrupt(t0, err); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Write(ctx, tk, etag); err != nil {
				t.Fatalf("Write of the failed corrupt task: %v", err)
			}
			back, _, err := e.store.Load(ctx, shard, "t1")
			if err != nil || back.Status != Failed || !bytes.Equal(back.CorruptBytes(), c.keep) || !strings.Contains(back.Error, ce.Reason) {
				t.Fatalf("reloaded: %v, status %s, %d bytes kept, error %q", err, back.Status, len(back.CorruptBytes()), back.Error)
			}
		})
	}
}

func TestStoreLoadTooLarge(t *testing.T) {
	clock := newFakeClock()
	mem := memstore.New(memstore.WithMaxObjectSize(1024))
	s := NewStore(mem, WithClock(clock.ServerTime))
	ctx := testCtx(t)
	shard := storage.ShardID{Group: "default", Index: 0}
	stored, _ := mem.Put(ctx, TaskKey(shard, "t1"), bytes.Repeat([]byte("x"), 2048))
	tk, etag, err := s.Load(ctx, shard, "t1")
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, storage.ErrTooLarge) || tk == nil || etag != stored || tk.CorruptSize != 2048 || tk.CorruptEncoding != CorruptNone {
		t.Fatalf("Load of an oversized object: %v, task %+v, etag %s", err, tk, etag)
	}
	tk.MarkCorrupt(t0, err)
	if _, err := s.Write(ctx, tk, etag); err != nil {
		t.Fatalf("failing it in place: %v", err)
	}
}

func TestStorePointers(t *testing.T) {
	e := newEnv(t, 8)
	ctx := testCtx(t)
	shard := storage.ShardID{Group: "default", Index: 3}
	var want []string
	for i := 4; i >= 0; i-- { // written out of due order
		tk := e.newTask("p" + string(rune('0'+i)))
		tk.AvailableAt = t0.Add(time.Duration(i) * time.Millisecond)
		if i%2 == 0 {
			tk.Entity = "user-" + string(rune('0'+i))
		}
		if err := e.store.PutPointer(ctx, tk); err != nil {
			t.Fatal(err)
		}
		want = append([]string{tk.PointerKey()}, want...)
	}
	// Junk under the prefix: skipped, reported by the page variant.
	junk := []string{PointerPrefix(shard) + "garbage", PointerPrefix(shard) + "20261122T170512.123Z_bad.id.x", PointerPrefix(shard) + "99991231T235959.999Z_a/b"}
	for _, k := range junk {
		e.mem.Put(ctx, k, nil)
	}
	ps, more, err := e.store.ListPointers(ctx, shard, "", 0)
	if err != nil || more {
		t.Fatalf("ListPointers: %v more %v", err, more)
	}
	var keys []string
	for _, p := range ps {
		keys = append(keys, p.Key)
		if p.Shard != shard || (p.EntityKey != "") != ((p.ID[1]-'0')%2 == 0) {
			t.Fatalf("pointer %+v", p)
		}
	}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("pointers %q, want %q in due order", keys, want)
	}
	page, err := e.store.ListPointersPage(ctx, shard, "", 0)
	if err != nil || len(page.Malformed) != 3 || len(page.Pointers) != 5 || page.Last != junk[0] || page.More {
		t.Fatalf("ListPointersPage: %v, %+v", err, page)
	}
	// Pages of two, resumed from the last key.
	var paged []string
	after := ""
	for {
		ps, more, err := e.store.ListPointers(ctx, shard, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			paged = append(paged, p.Key)
		}
		if !more {
			break
		}
		after = ps[len(ps)-1].Key
	}
	if !reflect.DeepEqual(paged, want) {
		t.Fatalf("paged pointers %q, want %q", paged, want)
	}
	// A page made only of junk is passed over: the caller still gets the
	// pointers behind it.
	e2 := newEnv(t, 8)
	for _, k := range junk {
		e2.mem.Put(ctx, k, nil)
	}
	late := e2.newTask("zz")
	late.AvailableAt = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)
	e2.store.PutPointer(ctx, late)
	ps, _, err = e2.store.ListPointers(ctx, shard, "", 1)
	if err != nil || len(ps) != 1 || ps[0].ID != "zz" {
		t.Fatalf("ListPointers behind junk: %v %+v", err, ps)
	}
	// Deletes, of present and missing pointers.
	for _, k := range append(want, "ready/default/3/none") {
		if err := e.store.DeletePointer(ctx, k); err != nil {
			t.Fatalf("DeletePointer %s: %v", k, err)
		}
	}
	if ps, _, _ := e.store.ListPointers(ctx, shard, "", 0); len(ps) != 0 {
		t.Fatalf("%d pointers left", len(ps))
	}
}
