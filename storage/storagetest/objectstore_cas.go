package storagetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/tenurehq/tenure/storage"
)

// Conditional-write races: how many writers and rounds.
const (
	objRaceWriters = 32
	objRaceRounds  = 10
)

func objTestCreateIfAbsent(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	etag, err := s.Create(ctx, "k", []byte("first"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if etag == "" {
		t.Fatal("Create returned an empty ETag")
	}
	objCheckBody(t, ctx, s, "k", []byte("first"), etag)
	_, err = s.Create(ctx, "k", []byte("second"))
	objCheckErr(t, "Create of an existing key", err, storage.ErrPrecondition, "k")
	objCheckBody(t, ctx, s, "k", []byte("first"), etag)
}

// objRace runs n writers at once (released together) and returns each one's
// ETag and error.
func objRace(n int, write func(i int) (string, error)) ([]string, []error) {
	etags, errs := make([]string, n), make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			etags[i], errs[i] = write(i)
		}()
	}
	close(start)
	wg.Wait()
	return etags, errs
}

// objOneWinner fails unless exactly one writer succeeded and every other lost
// with ErrPrecondition; it returns the winner.
func objOneWinner(t *testing.T, round int, errs []error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("round %d: writers %d and %d both won", round, winner, i)
			}
			winner = i
		case !errors.Is(err, storage.ErrPrecondition):
			t.Fatalf("round %d: writer %d lost with %v, want ErrPrecondition", round, i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("round %d: no writer won", round)
	}
	return winner
}

func objTestCreateRace(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	for round := 0; round < objRaceRounds; round++ {
		key := fmt.Sprintf("race/create/%d", round)
		body := func(i int) []byte { return []byte(fmt.Sprintf("writer %d of round %d", i, round)) }
		etags, errs := objRace(objRaceWriters, func(i int) (string, error) { return s.Create(ctx, key, body(i)) })
		w := objOneWinner(t, round, errs)
		objCheckBody(t, ctx, s, key, body(w), etags[w])
	}
}

func objTestReplaceRace(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	key := "race/replace"
	etag := objPut(t, ctx, s, key, []byte("initial"))
	for round := 0; round < objRaceRounds; round++ {
		body := func(i int) []byte { return []byte(fmt.Sprintf("writer %d of round %d", i, round)) }
		from := etag
		etags, errs := objRace(objRaceWriters, func(i int) (string, error) { return s.Replace(ctx, key, body(i), from) })
		w := objOneWinner(t, round, errs)
		objCheckBody(t, ctx, s, key, body(w), etags[w])
		etag = etags[w]
	}
}

func objTestReplaceStaleETag(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	e1, err := s.Create(ctx, "k", []byte("v1"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	e2, err := s.Replace(ctx, "k", []byte("v2"), e1)
	if err != nil {
		t.Fatalf("Replace with the current ETag: %v", err)
	}
	if e2 == e1 {
		t.Fatalf("Replace kept the ETag %s for a different body", e1)
	}
	_, err = s.Replace(ctx, "k", []byte("v3"), e1)
	objCheckErr(t, "Replace with a stale ETag", err, storage.ErrPrecondition, "k")
	objCheckBody(t, ctx, s, "k", []byte("v2"), e2)
	_, err = s.Replace(ctx, "k", []byte("v3"), `"0123456789abcdef0123456789abcdef"`)
	objCheckErr(t, "Replace with a made-up ETag", err, storage.ErrPrecondition, "k")
	e3, err := s.Replace(ctx, "k", []byte("v3"), e2)
	if err != nil {
		t.Fatalf("Replace with the current ETag: %v", err)
	}
	objCheckBody(t, ctx, s, "k", []byte("v3"), e3)
}

func objTestReplaceMissingKey(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	_, err := s.Replace(ctx, "never", []byte("x"), `"0123456789abcdef0123456789abcdef"`)
	objCheckErr(t, "Replace of a key never written", err, storage.ErrPrecondition, "never")

	etag := objPut(t, ctx, s, "gone", []byte("x"))
	if err := s.Delete(ctx, "gone"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = s.Replace(ctx, "gone", []byte("y"), etag)
	objCheckErr(t, "Replace of a deleted key with its last ETag", err, storage.ErrPrecondition, "gone")
	for _, k := range []string{"never", "gone"} {
		if _, err := s.Head(ctx, k); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("Head %s after a failed Replace: %v, want ErrNotFound (Replace must not create)", k, err)
		}
	}
}

func objTestMissingKey(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	_, err := s.Get(ctx, "missing")
	objCheckErr(t, "Get of a missing key", err, storage.ErrNotFound, "missing")
	_, err = s.Head(ctx, "missing")
	objCheckErr(t, "Head of a missing key", err, storage.ErrNotFound, "missing")
	for i := 0; i < 2; i++ {
		if err := s.Delete(ctx, "missing"); err != nil {
			t.Fatalf("Delete of a missing key: %v, want nil", err)
		}
	}
}

func objTestDeleteRemoves(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	objPut(t, ctx, s, "k", []byte("x"))
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	page, err := s.List(ctx, "", storage.ListOptions{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(page.Objects) != 0 {
		t.Fatalf("List after Delete: %v, want nothing", page.Objects)
	}
	etag, err := s.Create(ctx, "k", []byte("again"))
	if err != nil {
		t.Fatalf("Create after Delete: %v", err)
	}
	objCheckBody(t, ctx, s, "k", []byte("again"), etag)
}

func objTestDeleteIfMatch(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	e1 := objPut(t, ctx, s, "k", []byte("v1"))
	err := s.DeleteIfMatch(ctx, "k", `"0123456789abcdef0123456789abcdef"`)
	objCheckErr(t, "DeleteIfMatch with a made-up ETag", err, storage.ErrPrecondition, "k")
	e2, err := s.Replace(ctx, "k", []byte("v2"), e1)
	if err != nil {
		t.Fatalf("Replace: %v", err)
	}
	err = s.DeleteIfMatch(ctx, "k", e1)
	objCheckErr(t, "DeleteIfMatch with a stale ETag", err, storage.ErrPrecondition, "k")
	objCheckBody(t, ctx, s, "k", []byte("v2"), e2)

	if err := s.DeleteIfMatch(ctx, "k", e2); err != nil {
		t.Fatalf("DeleteIfMatch with the current ETag: %v", err)
	}
	if _, err := s.Head(ctx, "k"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Head after DeleteIfMatch: %v, want ErrNotFound", err)
	}
	page, err := s.List(ctx, "", storage.ListOptions{})
	if err != nil || len(page.Objects) != 0 {
		t.Fatalf("List after DeleteIfMatch: %v %v, want nothing", page.Objects, err)
	}
	// The version is gone either way: deleting it again, or a key never
	// written, is not an error.
	for _, k := range []string{"k", "never"} {
		if err := s.DeleteIfMatch(ctx, k, e2); err != nil {
			t.Fatalf("DeleteIfMatch of missing key %s: %v, want nil", k, err)
		}
	}
	// A conditional write on the deleted version loses.
	_, err = s.Replace(ctx, "k", []byte("v3"), e2)
	objCheckErr(t, "Replace of a key deleted by DeleteIfMatch", err, storage.ErrPrecondition, "k")
}

func objTestETagChanges(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	seen := map[string]string{}
	note := func(what, etag string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if prev, ok := seen[etag]; ok {
			t.Fatalf("%s returned ETag %s, already returned by %s", what, etag, prev)
		}
		seen[etag] = what
		return etag
	}
	e, err := s.Create(ctx, "k", []byte("one"))
	e = note("Create", e, err)
	e2, err := s.Replace(ctx, "k", []byte("two"), e)
	e = note("Replace", e2, err)
	e3, err := s.Put(ctx, "k", []byte("three"))
	e = note("Put", e3, err)
	e4, err := s.Put(ctx, "k", []byte("four"))
	e = note("second Put", e4, err)
	info, err := s.Head(ctx, "k")
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	if info.ETag != e {
		t.Fatalf("Head ETag %s, want the last write's %s", info.ETag, e)
	}
}

func objTestPutOverwrites(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	objPut(t, ctx, s, "k", []byte("v1"))
	e2 := objPut(t, ctx, s, "k", []byte("version two"))
	objCheckBody(t, ctx, s, "k", []byte("version two"), e2)
	info, err := s.Head(ctx, "k")
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	if info.Size != int64(len("version two")) {
		t.Fatalf("Head Size %d after overwrite, want %d", info.Size, len("version two"))
	}
}

// objCancelled returns a context that is already cancelled.
func objCancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
