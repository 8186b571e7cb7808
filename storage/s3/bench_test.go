package s3

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tenurehq/tenure/storage"
)

// benchBody is about the size of a task object.
var benchBody = []byte(fmt.Sprintf(`{"id":"0190f5c2-7d1e-7c3a-9d4b-000000000000","type":"email.send","status":"pending","input":%q}`, make([]byte, 600)))

// BenchmarkCreate measures a conditional PUT (If-None-Match: *) of a new key.
func BenchmarkCreate(b *testing.B) {
	s := openStore(b)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Create(ctx, fmt.Sprintf("tasks/0/%010d.json", i), benchBody); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplace measures a chain of conditional PUTs (If-Match), each on
// the ETag the previous one returned: a task's claim, renewals, completion.
func BenchmarkReplace(b *testing.B) {
	s := openStore(b)
	ctx := context.Background()
	etag, err := s.Put(ctx, "tasks/0/task.json", benchBody)
	if err != nil {
		b.Fatal(err)
	}
	body := append([]byte(nil), benchBody...)
	for i := 0; b.Loop(); i++ {
		copy(body[len(body)-12:], fmt.Sprintf("%010d\"}", i)) // a new body, so a new ETag
		if etag, err = s.Replace(ctx, "tasks/0/task.json", body, etag); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet measures a GET of a task-sized object.
func BenchmarkGet(b *testing.B) {
	s := openStore(b)
	ctx := context.Background()
	if _, err := s.Put(ctx, "tasks/0/task.json", benchBody); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Get(ctx, "tasks/0/task.json"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList1000 measures one LIST page of 1000 keys: a shard's
// reconciliation of its ready pointers.
func BenchmarkList1000(b *testing.B) {
	s := openStore(b)
	ctx := context.Background()
	keys := make(chan string)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				if _, err := s.Put(ctx, k, nil); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < storage.MaxListLimit; i++ {
		keys <- fmt.Sprintf("ready/0/20260101T000000Z/%010d", i)
	}
	close(keys)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		page, err := s.List(ctx, "ready/0/", storage.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if len(page.Objects) != storage.MaxListLimit {
			b.Fatalf("listed %d keys, want %d", len(page.Objects), storage.MaxListLimit)
		}
	}
}
