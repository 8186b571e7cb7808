package memstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/storagetest"
)

func TestConformance(t *testing.T) {
	storagetest.TestObjectStore(t, func(t *testing.T) storage.ObjectStore { return New() })
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestETagIsQuotedMD5(t *testing.T) {
	s := New()
	etag, err := s.Put(ctx(t), "k", []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	// md5("hello"), as S3 reports it for a single-part upload.
	if want := `"5d41402abc4b2a76b9719d911017c592"`; etag != want {
		t.Fatalf("ETag = %s, want %s", etag, want)
	}
	// S3 servers accept the ETag with or without its quotes in If-Match.
	if _, err := s.Replace(ctx(t), "k", []byte("bye"), "5d41402abc4b2a76b9719d911017c592"); err != nil {
		t.Fatalf("Replace with the unquoted ETag: %v", err)
	}
}

func TestInjectedClock(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := New(WithClock(clock))
	st, err := s.ServerTime(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Now.Equal(now) || st.Uncertainty != 0 {
		t.Fatalf("ServerTime = %+v, want %s exactly", st, now)
	}
	if _, err := s.Put(ctx(t), "k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	info, err := s.Head(ctx(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Truncate(time.Second); !info.LastModified.Equal(want) {
		t.Fatalf("LastModified = %s, want %s (S3's one-second resolution)", info.LastModified, want)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if st, _ := s.ServerTime(ctx(t)); !st.Now.Equal(now) {
		t.Fatalf("ServerTime after moving the clock = %s, want %s", st.Now, now)
	}
}

func TestMaxObjectSize(t *testing.T) {
	s := New(WithMaxObjectSize(4))
	if _, err := s.Put(ctx(t), "ok", []byte("1234")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx(t), "ok"); err != nil {
		t.Fatalf("Get at the limit: %v", err)
	}
	if _, err := s.Put(ctx(t), "big", []byte("12345")); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(ctx(t), "big")
	var oe *storage.OpError
	if !errors.Is(err, storage.ErrTooLarge) || !errors.As(err, &oe) || oe.Key != "big" {
		t.Fatalf("Get over the limit: %v, want ErrTooLarge naming the key", err)
	}
}

func TestCallCounts(t *testing.T) {
	s := New()
	c := ctx(t)
	etag, _ := s.Create(c, "k", []byte("1"))
	s.Create(c, "k", []byte("2")) // lost: still a request
	s.Replace(c, "k", []byte("3"), etag)
	s.Get(c, "k")
	s.Get(c, "missing")
	s.Head(c, "k")
	s.List(c, "", storage.ListOptions{})
	s.Delete(c, "k")
	s.Put(c, "", nil) // refused before any "request"
	want := map[string]int{OpCreate: 2, OpReplace: 1, OpGet: 2, OpHead: 1, OpList: 1, OpDelete: 1}
	got := s.CallCounts()
	if len(got) != len(want) {
		t.Fatalf("CallCounts = %v, want %v", got, want)
	}
	for op, n := range want {
		if got[op] != n || s.Calls(op) != n {
			t.Fatalf("Calls(%s) = %d (CallCounts %v), want %d", op, s.Calls(op), got, n)
		}
	}
	s.ResetCalls()
	if got := s.CallCounts(); len(got) != 0 {
		t.Fatalf("CallCounts after ResetCalls = %v", got)
	}
}

// TestDeleteIfMatchIsAtomic: a conditional delete and a conditional write
// holding the same ETag never both succeed here, as on S3 (a property the
// shared suite cannot ask of VersityGW; see storagetest).
func TestDeleteIfMatchIsAtomic(t *testing.T) {
	s := New()
	c := ctx(t)
	for round := 0; round < 200; round++ {
		etag, err := s.Put(c, "k", []byte{byte(round)})
		if err != nil {
			t.Fatal(err)
		}
		var derr, rerr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; derr = s.DeleteIfMatch(c, "k", etag) }()
		go func() {
			defer wg.Done()
			<-start
			_, rerr = s.Replace(c, "k", []byte{byte(round), 1}, etag)
		}()
		close(start)
		wg.Wait()
		_, herr := s.Head(c, "k")
		switch {
		case derr == nil && rerr == nil:
			t.Fatalf("round %d: the delete and the write both succeeded", round)
		case derr == nil && !errors.Is(herr, storage.ErrNotFound):
			t.Fatalf("round %d: the delete won but the key holds an object (%v)", round, herr)
		case rerr == nil && herr != nil:
			t.Fatalf("round %d: the write won but the key is gone: %v", round, herr)
		case derr != nil && rerr != nil:
			t.Fatalf("round %d: neither won: %v / %v", round, derr, rerr)
		}
	}
}
