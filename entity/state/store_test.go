package state

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var shard = storage.ShardID{Group: "default", Index: 3}

// s3Store returns a state store and its object store on a fresh prefix of
// the shared VersityGW gateway.
func s3Store(t *testing.T, opts ...Option) (*Store, storage.ObjectStore) {
	t.Helper()
	gw := testenv.SharedS3(t)
	obj, err := s3store.New(gw.Client(), gw.Bucket(t), s3store.WithPrefix("state-test/"+testenv.Name(t, 40)+"/"))
	if err != nil {
		t.Fatalf("s3 store: %v", err)
	}
	return NewStore(obj, opts...), obj
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestKey(t *testing.T) {
	ids := []string{"a", "a/b", "a.b", "ü/..", "", "a b"}
	seen := map[string]string{}
	for _, id := range ids {
		k := Key(shard, "counter", id)
		if !strings.HasPrefix(k, "state/default/3/counter/") || !strings.HasSuffix(k, ".json") {
			t.Fatalf("Key(%q) = %q", id, k)
		}
		if strings.Count(k, "/") != 4 {
			t.Fatalf("Key(%q) = %q: the id changed the key's shape", id, k)
		}
		if prev, dup := seen[k]; dup {
			t.Fatalf("ids %q and %q share key %q", prev, id, k)
		}
		seen[k] = id
	}
	if got := ShardPrefix(shard); got != "state/default/3/" {
		t.Fatalf("ShardPrefix = %q", got)
	}
}

// TestS3FenceAndSave walks the protocol against real S3: a fence of an
// absent object creates it, the same epoch re-reads it, a save writes
// over the fenced version, a newer fence takes it over and the older
// owner's save is refused with the epochs named, the object unchanged.
func TestS3FenceAndSave(t *testing.T) {
	s, obj := s3Store(t)
	ctx := testCtx(t)
	if _, _, err := s.Get(ctx, shard, "counter", "c1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get absent: %v, want ErrNotFound", err)
	}
	old, oldTag, err := s.Fence(ctx, shard, "counter", "c1", 10, "runner-a")
	if err != nil || old.Epoch != 10 || old.Rev != 1 || old.HasState() {
		t.Fatalf("Fence absent: %v %+v", err, old)
	}
	again, againTag, err := s.Fence(ctx, shard, "counter", "c1", 10, "runner-a")
	if err != nil || againTag != oldTag || again.Rev != 1 {
		t.Fatalf("Fence same epoch: %v rev %d etag %q, want the stored version %q", err, again.Rev, againTag, oldTag)
	}
	old.State = json.RawMessage(`{"total":1}`)
	if oldTag, err = s.Save(ctx, shard, old, oldTag); err != nil || old.Rev != 2 {
		t.Fatalf("Save: %v rev %d", err, old.Rev)
	}

	// The successor fences with a higher epoch and keeps the state.
	next, nextTag, err := s.Fence(ctx, shard, "counter", "c1", 11, "runner-b")
	if err != nil || next.Epoch != 11 || next.Rev != 3 || string(next.State) != `{"total":1}` {
		t.Fatalf("Fence newer: %v %+v", err, next)
	}
	// The stale owner's save is refused and leaves the object alone.
	old.State = json.RawMessage(`{"total":99}`)
	_, err = s.Save(ctx, shard, old, oldTag)
	var fe *FencedError
	if !errors.As(err, &fe) || fe.Epoch != 10 || fe.Stored != 11 || !errors.Is(err, ErrFenced) {
		t.Fatalf("stale Save: %v, want *FencedError 10 < 11", err)
	}
	stored, tag, err := s.Get(ctx, shard, "counter", "c1")
	if err != nil || tag != nextTag || string(stored.State) != `{"total":1}` || stored.Epoch != 11 {
		t.Fatalf("after stale save: %v %+v", err, stored)
	}
	// The stale owner cannot fence back either.
	if _, _, err := s.Fence(ctx, shard, "counter", "c1", 10, "runner-a"); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale Fence: %v, want ErrFenced", err)
	}
	// An operator's delete fences the live owner's next save off too.
	if err := s.Delete(ctx, shard, "counter", "c1"); err != nil {
		t.Fatal(err)
	}
	next.State = json.RawMessage(`{"total":2}`)
	if _, err = s.Save(ctx, shard, next, nextTag); !errors.As(err, &fe) || !fe.Deleted {
		t.Fatalf("Save after delete: %v, want *FencedError Deleted", err)
	}
	if _, err := obj.Head(ctx, Key(shard, "counter", "c1")); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("object after refused save: %v, want gone", err)
	}
}

// TestS3RefenceRefusesALateWrite: against real S3, a save of epoch 10
// sent from the version a GET returned, and applied only after a refence
// of the same epoch, is refused: the refence wrote the object back (new
// ETag, same state and epoch) although it already recorded the epoch,
// where a Fence only reads it and lets the late save land.
func TestS3RefenceRefusesALateWrite(t *testing.T) {
	s, _ := s3Store(t)
	ctx := testCtx(t)
	env, tag, err := s.Fence(ctx, shard, "counter", "c1", 10, "runner-a")
	if err != nil {
		t.Fatal(err)
	}
	env.State = json.RawMessage(`{"total":1}`)
	if tag, err = s.Save(ctx, shard, env, tag); err != nil {
		t.Fatal(err)
	}
	late := env.Clone()
	late.State = json.RawMessage(`{"total":3}`)

	// A Fence of the same epoch only reads: the late save still lands.
	if _, ftag, err := s.Fence(ctx, shard, "counter", "c1", 10, "runner-a"); err != nil || ftag != tag {
		t.Fatalf("Fence of the same epoch: %v, etag %q want %q (read only)", err, ftag, tag)
	}
	// A Refence writes it back: the same state and epoch, a new ETag.
	re, retag, err := s.Refence(ctx, shard, "counter", "c1", 10, "runner-a")
	if err != nil || retag == tag || re.Epoch != 10 || re.Rev != env.Rev+1 || string(re.State) != `{"total":1}` {
		t.Fatalf("Refence: %v %+v etag %q (old %q), want rev %d, the state kept, a new ETag", err, re, retag, tag, env.Rev+1)
	}
	if _, err := s.Save(ctx, shard, late, tag); !errors.Is(err, ErrFenced) {
		t.Fatalf("the late save after the refence: %v, want ErrFenced", err)
	}
	stored, stag, err := s.Get(ctx, shard, "counter", "c1")
	if err != nil || stag != retag || string(stored.State) != `{"total":1}` {
		t.Fatalf("stored after the late save: %v %+v", err, stored)
	}
	// Refence of an absent object creates it, as Fence does.
	if created, _, err := s.Refence(ctx, shard, "counter", "c2", 10, "runner-a"); err != nil || created.Rev != 1 || created.HasState() {
		t.Fatalf("Refence absent: %v %+v", err, created)
	}
}

// TestS3FenceRace: two fences of different epochs race on an absent
// object; whatever the order, the newer epoch is stored and the older
// owner's save is refused.
func TestS3FenceRace(t *testing.T) {
	s, _ := s3Store(t)
	ctx := testCtx(t)
	type res struct {
		env  *Envelope
		etag string
		err  error
	}
	ch := make(chan res, 2)
	for _, epoch := range []int64{20, 21} {
		go func() {
			env, etag, err := s.Fence(ctx, shard, "counter", "race", epoch, "r")
			ch <- res{env, etag, err}
		}()
	}
	var older *res
	for range 2 {
		r := <-ch
		if r.err != nil {
			if !errors.Is(r.err, ErrFenced) {
				t.Fatalf("Fence: %v", r.err)
			}
			continue
		}
		if r.env.Epoch == 20 {
			older = &r
		}
	}
	stored, _, err := s.Get(ctx, shard, "counter", "race")
	if err != nil || stored.Epoch != 21 {
		t.Fatalf("stored after race: %v %+v, want epoch 21", err, stored)
	}
	if older != nil {
		older.env.State = json.RawMessage(`1`)
		if _, err := s.Save(ctx, shard, older.env, older.etag); !errors.Is(err, ErrFenced) {
			t.Fatalf("older owner's save: %v, want ErrFenced", err)
		}
	}
}

func TestS3CorruptAndTooLarge(t *testing.T) {
	s, obj := s3Store(t, WithMaxSize(16))
	ctx := testCtx(t)
	key := Key(shard, "counter", "bad")
	if _, err := obj.Put(ctx, key, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	var ce *CorruptError
	if _, _, err := s.Get(ctx, shard, "counter", "bad"); !errors.As(err, &ce) || ce.Key != key || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get corrupt: %v, want *CorruptError naming %s", err, key)
	}
	if _, _, err := s.Fence(ctx, shard, "counter", "bad", 1, "r"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Fence corrupt: %v", err)
	}
	// An object of another entity under this key is corrupt too.
	other, _ := json.Marshal(Envelope{Type: "counter", ID: "someone-else", Epoch: 1, Rev: 1})
	if _, err := obj.Put(ctx, key, other); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, shard, "counter", "bad"); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "someone-else") {
		t.Fatalf("Get foreign: %v", err)
	}

	env, etag, err := s.Fence(ctx, shard, "counter", "big", 1, "r")
	if err != nil {
		t.Fatal(err)
	}
	env.State = json.RawMessage(`"0123456789abcdefghij"`)
	var tl *TooLargeError
	if _, err := s.Save(ctx, shard, env, etag); !errors.As(err, &tl) || tl.Size != 22 || tl.Limit != 16 {
		t.Fatalf("Save too large: %v", err)
	}
	if got, _, _ := s.Get(ctx, shard, "counter", "big"); got.Rev != 1 {
		t.Fatalf("too large save wrote: rev %d", got.Rev)
	}
}

func TestRecord(t *testing.T) {
	var e Envelope
	for i := range 5 {
		e.Record(string(rune('a'+i)), json.RawMessage(`1`), 3)
	}
	if len(e.Applied) != 3 || e.Applied[0].Task != "c" {
		t.Fatalf("Applied = %+v, want c d e", e.Applied)
	}
	if _, ok := e.AppliedResult("a"); ok {
		t.Fatal("a kept")
	}
	if r, ok := e.AppliedResult("e"); !ok || string(r) != "1" {
		t.Fatalf("e: %s %v", r, ok)
	}
}
