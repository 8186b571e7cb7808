package storagetest

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
)

func objTestBodies(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	random := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	bodies := map[string][]byte{
		"empty":       {},
		"nil":         nil,
		"zero":        {0},
		"every-byte":  every,
		"random-64k":  random,
		"invalid-utf": []byte("\xff\xfe\xfd"),
		"crlf":        []byte("a\r\nb\r\n\r\n"),
	}
	for key, body := range bodies {
		etag := objPut(t, ctx, s, key, body)
		o := objGet(t, ctx, s, key)
		if !bytes.Equal(o.Body, body) || len(o.Body) != len(body) {
			t.Fatalf("Get %s: %d bytes back, want %d identical ones", key, len(o.Body), len(body))
		}
		if o.Size != int64(len(body)) || o.ETag != etag {
			t.Fatalf("Get %s: Size %d ETag %s, want %d and Put's %s", key, o.Size, o.ETag, len(body), etag)
		}
		info, err := s.Head(ctx, key)
		if err != nil {
			t.Fatalf("Head %s: %v", key, err)
		}
		if info.Key != key || info.Size != o.Size || info.ETag != o.ETag || !info.LastModified.Equal(o.LastModified) {
			t.Fatalf("Head %s = %+v, Get = %+v: want the same key, size, ETag and time", key, info, o.ObjectInfo)
		}
	}
	// The store keeps its own copy: changing the caller's slices afterwards
	// changes nothing stored.
	body := []byte("original")
	objPut(t, ctx, s, "copy", body)
	copy(body, "mutated!")
	got := objGet(t, ctx, s, "copy")
	if string(got.Body) != "original" {
		t.Fatalf("stored body changed with the caller's slice: %q", got.Body)
	}
	copy(got.Body, "mutated!")
	if again := objGet(t, ctx, s, "copy"); string(again.Body) != "original" {
		t.Fatalf("stored body changed with a returned slice: %q", again.Body)
	}
}

// objClockSlack allows for a Date header that trails the server's clock by a
// little more than the adapter's resolution allowance on a loaded machine.
const objClockSlack = 250 * time.Millisecond

func objTestServerTime(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	// The server's clock is observed independently through LastModified of
	// an object written between two ServerTime calls: the write happened
	// in the bracket, and LastModified is its time truncated to the second.
	local0 := time.Now()
	st1, err := s.ServerTime(ctx)
	if err != nil {
		t.Fatalf("ServerTime: %v", err)
	}
	if _, err := s.Create(ctx, "clock", []byte("tick")); err != nil {
		t.Fatalf("Create: %v", err)
	}
	st2, err := s.ServerTime(ctx)
	if err != nil {
		t.Fatalf("ServerTime: %v", err)
	}
	bracket := time.Since(local0)
	info, err := s.Head(ctx, "clock")
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	lm := info.LastModified
	for _, st := range []storage.ServerTime{st1, st2} {
		if st.Now.IsZero() || st.Uncertainty < 0 || st.Uncertainty > 2*time.Second {
			t.Fatalf("ServerTime = %+v: want a time with an uncertainty in [0, 2s]", st)
		}
	}
	if lm.Before(st1.Earliest().Add(-time.Second - objClockSlack)) {
		t.Fatalf("LastModified %s is before the first estimate's earliest %s (less its 1s resolution)", lm, st1.Earliest())
	}
	if lm.After(st2.Latest().Add(objClockSlack)) {
		t.Fatalf("LastModified %s is after the second estimate's latest %s", lm, st2.Latest())
	}
	bound := time.Second + bracket + time.Second + objClockSlack
	for i, st := range []storage.ServerTime{st1, st2} {
		if d := st.Now.Sub(lm).Abs(); d > bound {
			t.Fatalf("estimate %d %s is %s from LastModified %s; want ≤ %s", i+1, st.Now, d, lm, bound)
		}
	}
	if st2.Latest().Before(st1.Earliest()) {
		t.Fatalf("the clock went backwards: %+v then %+v", st1, st2)
	}
}

// objReturnsPromptly runs call and fails the test if it has not returned within
// a few seconds, rather than letting a hung call hang the suite.
func objReturnsPromptly(t *testing.T, what string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		t.Fatalf("%s did not return within 5s", what)
		return nil
	}
}

// objAllOps calls every operation on ctx and reports each one's error.
func objAllOps(ctx context.Context, s storage.ObjectStore, key, etag string) map[string]func() error {
	return map[string]func() error{
		"Create":        func() error { _, err := s.Create(ctx, key+"-new", []byte("x")); return err },
		"Replace":       func() error { _, err := s.Replace(ctx, key, []byte("x"), etag); return err },
		"Put":           func() error { _, err := s.Put(ctx, key, []byte("x")); return err },
		"Get":           func() error { _, err := s.Get(ctx, key); return err },
		"Head":          func() error { _, err := s.Head(ctx, key); return err },
		"Delete":        func() error { return s.Delete(ctx, key) },
		"DeleteIfMatch": func() error { return s.DeleteIfMatch(ctx, key, etag) },
		"List":          func() error { _, err := s.List(ctx, "", storage.ListOptions{}); return err },
		"ServerTime": func() error {
			_, err := s.ServerTime(ctx)
			return err
		},
	}
}

func objTestContextCanceled(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	etag := objPut(t, ctx, s, "k", []byte("kept"))
	for name, call := range objAllOps(objCancelled(), s, "k", etag) {
		err := objReturnsPromptly(t, name, call)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s with a cancelled context: %v, want context.Canceled", name, err)
		}
		if errors.Is(err, storage.ErrUnavailable) {
			t.Fatalf("%s with a cancelled context: %v reports the backend unavailable", name, err)
		}
		var oe *storage.OpError
		if !errors.As(err, &oe) {
			t.Fatalf("%s with a cancelled context: %v (%T) is not a *storage.OpError", name, err, err)
		}
	}
	objCheckBody(t, ctx, s, "k", []byte("kept"), etag)
	if _, err := s.Head(ctx, "k-new"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Head k-new after a cancelled Create: %v, want ErrNotFound", err)
	}
}

func objTestContextDeadline(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	etag := objPut(t, ctx, s, "k", []byte("kept"))
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for name, call := range objAllOps(expired, s, "k", etag) {
		err := objReturnsPromptly(t, name, call)
		if !errors.Is(err, storage.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s past its deadline: %v, want ErrUnavailable and context.DeadlineExceeded", name, err)
		}
	}
	objCheckBody(t, ctx, s, "k", []byte("kept"), etag)
}

func objTestInvalidArguments(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	etag := objPut(t, ctx, s, "k", []byte("kept"))
	long := strings.Repeat("x", 1025)
	for _, key := range []string{"", "\xff\xfe", "nul\x00byte", "new\nline", long} {
		_, err := s.Create(ctx, key, []byte("x"))
		objCheckErr(t, "Create of a bad key", err, storage.ErrInvalid, "")
		_, err = s.Put(ctx, key, []byte("x"))
		objCheckErr(t, "Put of a bad key", err, storage.ErrInvalid, "")
		_, err = s.Get(ctx, key)
		objCheckErr(t, "Get of a bad key", err, storage.ErrInvalid, "")
	}
	for _, bad := range []string{"", "*"} {
		_, err := s.Replace(ctx, "k", []byte("x"), bad)
		objCheckErr(t, "Replace with If-Match "+bad, err, storage.ErrInvalid, "k")
		err = s.DeleteIfMatch(ctx, "k", bad)
		objCheckErr(t, "DeleteIfMatch with If-Match "+bad, err, storage.ErrInvalid, "k")
	}
	err := s.DeleteIfMatch(ctx, "nul\x00byte", etag)
	objCheckErr(t, "DeleteIfMatch of a bad key", err, storage.ErrInvalid, "")
	_, err = s.List(ctx, "\xff", storage.ListOptions{})
	objCheckErr(t, "List of a bad prefix", err, storage.ErrInvalid, "")
	_, err = s.List(ctx, "", storage.ListOptions{StartAfter: "\x01"})
	objCheckErr(t, "List after a bad key", err, storage.ErrInvalid, "")
	_, err = s.List(ctx, "", storage.ListOptions{Limit: -1})
	objCheckErr(t, "List with a negative limit", err, storage.ErrInvalid, "")
	objCheckBody(t, ctx, s, "k", []byte("kept"), etag)
}
