package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// TestSubmitWakeNoteCarriesTheTask: a submission's wake-up note carries the
// object as stored and its ETag, which FromHint turns into the task Load
// reads; a task larger than MaxWakeBody, a replay's wake-up and a client
// with PlainWakeNotes send the pointer key alone.
func TestSubmitWakeNoteCarriesTheTask(t *testing.T) {
	e := newEnv(t, 16)
	tk := e.submit(t, SubmitRequest{Type: "email", Entity: "user-1", Input: json.RawMessage(`{"to":"a@b.c"}`)})
	hints := e.waker.Hints()
	if len(hints) != 1 || hints[0] == nil {
		t.Fatalf("hints %+v, want one", hints)
	}
	loaded, etag, err := e.store.Load(testCtx(t), tk.Shard, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := e.mem.Get(testCtx(t), tk.Key())
	if err != nil {
		t.Fatal(err)
	}
	if hints[0].ETag != etag || !bytes.Equal(hints[0].Body, obj.Body) {
		t.Fatalf("hint %q %s, want the stored object %q %s", hints[0].ETag, hints[0].Body, etag, obj.Body)
	}
	p, err := ParsePointer(tk.PointerKey())
	if err != nil {
		t.Fatal(err)
	}
	fromHint, hetag, err := e.store.FromHint(p, *hints[0])
	if err != nil || hetag != etag || !reflect.DeepEqual(fromHint, loaded) {
		t.Fatalf("FromHint = %+v, %q, %v; want %+v, %q", fromHint, hetag, err, loaded, etag)
	}

	// Too large for a note: the pointer alone.
	big := json.RawMessage(`"` + strings.Repeat("x", MaxWakeBody) + `"`)
	e.submit(t, SubmitRequest{Type: "email", Input: big})
	// A replay's wake-up (after a cancel, which wakes no one): the pointer
	// alone.
	if _, err := e.cli.Cancel(testCtx(t), tk.Ref()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Replay(testCtx(t), tk.Ref()); err != nil {
		t.Fatal(err)
	}
	plain, err := NewClient(e.store, ClientConfig{Shards: 16, Waker: e.waker, PlainWakeNotes: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := plain.Submit(testCtx(t), SubmitRequest{Type: "email"}); err != nil {
		t.Fatal(err)
	}
	if hints := e.waker.Hints(); len(hints) != 4 || hints[1] != nil || hints[2] != nil || hints[3] != nil {
		t.Fatalf("hints %+v, want none after the first", hints)
	}
}

// TestWakeNoteFormat: a note round-trips; a bare pointer key (an older
// submitter's note) parses without a hint; a hint this version cannot read
// is dropped, keeping the pointer; a malformed key is an error.
func TestWakeNoteFormat(t *testing.T) {
	key := PointerKey(storage.ShardID{Group: "default", Index: 3}, t0, "id-1", "email", "user-1")
	h := &WakeHint{ETag: `"abc"`, Body: []byte(`{"id":"id-1"}`)}
	n, err := ParseWakeNote(FormatWakeNote(key, h))
	if err != nil || n.Pointer.Key != key || n.Hint == nil || n.Hint.ETag != h.ETag || !bytes.Equal(n.Hint.Body, h.Body) {
		t.Fatalf("round trip: %+v, %v", n, err)
	}
	for name, note := range map[string]string{
		"bare key":        key,
		"other version":   key + "\nt9 \"abc\"\n{}",
		"no body":         key + "\nt1 \"abc\"\n",
		"no etag":         key + "\nt1 \n{}",
		"no hint line":    key + "\n",
		"body over limit": key + "\nt1 \"abc\"\n" + strings.Repeat("x", MaxWakeBody+1),
	} {
		n, err := ParseWakeNote(note)
		if err != nil || n.Pointer.Key != key || n.Hint != nil {
			t.Errorf("%s: %+v, %v; want the pointer without a hint", name, n, err)
		}
	}
	if FormatWakeNote(key, &WakeHint{ETag: `"abc"`, Body: make([]byte, MaxWakeBody+1)}) != key {
		t.Error("a body over MaxWakeBody was put in the note")
	}
	if _, err := ParseWakeNote("ready/default/3/garbage\nt1 \"abc\"\n{}"); !errors.Is(err, ErrMalformedKey) {
		t.Errorf("malformed key: %v, want ErrMalformedKey", err)
	}
}

// TestOldRunnersRejectHintedNotes: a runner from before hints parses the
// whole note as a pointer key (ParsePointer). For every shape of pointer
// and body that must fail, so that it ignores the wake-up (the task starts
// at its reconciliation) rather than act on a pointer that does not exist.
func TestOldRunnersRejectHintedNotes(t *testing.T) {
	bodies := []string{`{"id":"x"}`, `{"a":"b/c.d"}`, `x`, `.0123456789abcdef`}
	for _, entity := range []string{"", "user-1"} {
		key := PointerKey(storage.ShardID{Group: "default", Index: 3}, t0, "id-1", "email", entity)
		for _, body := range bodies {
			note := FormatWakeNote(key, &WakeHint{ETag: `"abc"`, Body: []byte(body)})
			if note == key {
				t.Fatalf("no hint in the note for %q", body)
			}
			if p, err := ParsePointer(note); err == nil {
				t.Errorf("entity %q, body %q: an old runner reads the note as pointer %+v", entity, body, p)
			}
		}
	}
}

// TestFromHintRefusesOtherTasks: a hint whose body is not a valid task of
// the pointer's shard and id is refused with ErrBadHint, not ErrCorrupt
// (the object may be fine).
func TestFromHintRefusesOtherTasks(t *testing.T) {
	e := newEnv(t, 16)
	a := e.submit(t, SubmitRequest{Type: "email"})
	e.submit(t, SubmitRequest{Type: "email", Delay: time.Second})
	hints := e.waker.Hints()
	pa, err := ParsePointer(a.PointerKey())
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]WakeHint{
		"another task": *hints[1],
		"not json":     {ETag: hints[0].ETag, Body: []byte("{")},
		"invalid task": {ETag: hints[0].ETag, Body: []byte(`{"id":"` + a.ID + `"}`)},
	} {
		_, _, err := e.store.FromHint(pa, h)
		if !errors.Is(err, ErrBadHint) || errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrBadHint only", name, err)
		}
	}
}
