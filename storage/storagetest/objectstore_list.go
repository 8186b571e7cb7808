package storagetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/tenurehq/tenure/storage"
)

// objPutAll writes keys (body = key) with bounded concurrency, in random order,
// and returns their ETags.
func objPutAll(t *testing.T, ctx context.Context, s storage.ObjectStore, keys []string) map[string]string {
	t.Helper()
	order := slices.Clone(keys)
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	const workers = 16
	var (
		mu    sync.Mutex
		etags = map[string]string{}
		first error
		wg    sync.WaitGroup
		next  = make(chan string)
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				etag, err := s.Put(ctx, k, []byte(k))
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("Put %s: %w", k, err)
				}
				etags[k] = etag
				mu.Unlock()
			}
		}()
	}
	for _, k := range order {
		next <- k
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
	return etags
}

func objListKeys(t *testing.T, ctx context.Context, s storage.ObjectStore, prefix string, opts storage.ListOptions) ([]string, bool) {
	t.Helper()
	page, err := s.List(ctx, prefix, opts)
	if err != nil {
		t.Fatalf("List %q %+v: %v", prefix, opts, err)
	}
	keys := []string{}
	for _, o := range page.Objects {
		keys = append(keys, o.Key)
	}
	return keys, page.Truncated
}

func objCheckKeys(t *testing.T, what string, got, want []string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

func objTestListOrder(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	// Byte order, as S3 lists: '-' (0x2d) < '.' < '/' (0x2f) < '0' (0x30),
	// upper case before lower case, multi-byte UTF-8 after ASCII. No key is
	// a "directory" of another (no "a" beside "a/b"): file-backed servers
	// such as VersityGW's posix backend cannot hold both.
	keys := []string{"a/b", "a-b", "a0", "a.b", "a/c/d", "A", "b", "a~", "aa", "a b", "é", "z/é", "a/bc", "a/b-c"}
	objPutAll(t, ctx, s, keys)
	want := slices.Clone(keys)
	slices.Sort(want)
	got, truncated := objListKeys(t, ctx, s, "", storage.ListOptions{})
	objCheckKeys(t, "List", got, want)
	if truncated {
		t.Fatal("List of 14 keys reports Truncated")
	}
	page, err := s.List(ctx, "", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range page.Objects {
		if o.Size != int64(len(o.Key)) || o.ETag == "" || o.LastModified.IsZero() {
			t.Fatalf("List entry %+v: want Size %d, an ETag and LastModified", o, len(o.Key))
		}
	}
}

func objTestListPrefix(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	objPutAll(t, ctx, s, []string{"p/1/x", "p/1/y", "p/10/z", "p/2", "q/1", "p0"})
	cases := []struct {
		prefix string
		want   []string
	}{
		{"p/1/", []string{"p/1/x", "p/1/y"}},
		{"p/1", []string{"p/1/x", "p/1/y", "p/10/z"}}, // a string prefix, not a directory
		{"p/", []string{"p/1/x", "p/1/y", "p/10/z", "p/2"}},
		{"p", []string{"p/1/x", "p/1/y", "p/10/z", "p/2", "p0"}},
		{"q/", []string{"q/1"}},
		{"p/2", []string{"p/2"}},
		{"nothing/", nil},
		{"", []string{"p/1/x", "p/1/y", "p/10/z", "p/2", "p0", "q/1"}},
	}
	for _, c := range cases {
		got, truncated := objListKeys(t, ctx, s, c.prefix, storage.ListOptions{})
		objCheckKeys(t, fmt.Sprintf("List %q", c.prefix), got, c.want)
		if truncated {
			t.Fatalf("List %q reports Truncated", c.prefix)
		}
	}
}

func objTestListStartAfter(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	var keys []string
	for i := 0; i < 10; i++ {
		keys = append(keys, fmt.Sprintf("k/%02d", i))
	}
	objPutAll(t, ctx, s, append(slices.Clone(keys), "j", "l"))
	cases := []struct {
		prefix, after string
		want          []string
	}{
		{"k/", "k/04", keys[5:]},
		{"k/", "k/045", keys[5:]}, // need not exist
		{"k/", "k/09", nil},
		{"k/", "", keys},
		{"k/", "a", keys},  // before the prefix
		{"k/", "k/", keys}, // the prefix itself
		{"k/", "z", nil},   // after the prefix
		{"", "k/07", append(slices.Clone(keys[8:]), "l")},
	}
	for _, c := range cases {
		got, truncated := objListKeys(t, ctx, s, c.prefix, storage.ListOptions{StartAfter: c.after})
		objCheckKeys(t, fmt.Sprintf("List %q after %q", c.prefix, c.after), got, c.want)
		if truncated {
			t.Fatalf("List %q after %q reports Truncated", c.prefix, c.after)
		}
	}
}

func objTestListLimit(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	var keys []string
	for i := 0; i < 10; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	objPutAll(t, ctx, s, keys)

	got, truncated := objListKeys(t, ctx, s, "", storage.ListOptions{Limit: 3})
	objCheckKeys(t, "List limit 3", got, keys[:3])
	if !truncated {
		t.Fatal("List limit 3 of 10 keys: Truncated is false")
	}
	// Page through by StartAfter: 3, 3, 3, 1.
	var all []string
	after := ""
	for pages := 1; ; pages++ {
		got, truncated := objListKeys(t, ctx, s, "", storage.ListOptions{Limit: 3, StartAfter: after})
		if len(got) > 3 {
			t.Fatalf("page %d has %d keys, limit 3", pages, len(got))
		}
		all = append(all, got...)
		if !truncated {
			if pages != 4 {
				t.Fatalf("listing ended after %d pages of 3, want 4", pages)
			}
			break
		}
		if pages >= 4 || len(got) == 0 {
			t.Fatalf("page %d: Truncated with %d keys", pages, len(got))
		}
		after = got[len(got)-1]
	}
	objCheckKeys(t, "pages of 3", all, keys)

	got, truncated = objListKeys(t, ctx, s, "", storage.ListOptions{Limit: 1})
	objCheckKeys(t, "List limit 1", got, keys[:1])
	if !truncated {
		t.Fatal("List limit 1 of 10 keys: Truncated is false")
	}
	got, truncated = objListKeys(t, ctx, s, "", storage.ListOptions{Limit: 5000})
	objCheckKeys(t, "List limit above MaxListLimit", got, keys)
	if truncated {
		t.Fatal("List limit 5000 of 10 keys reports Truncated")
	}
}

func objTestListPagination(t *testing.T, s storage.ObjectStore) {
	ctx := objContext(t)
	const n = storage.MaxListLimit + 100
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("page/%05d", i)
	}
	etags := objPutAll(t, ctx, s, keys)

	// Manual pages of the default (maximum) size.
	first, err := s.List(ctx, "page/", storage.ListOptions{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(first.Objects) != storage.MaxListLimit || !first.Truncated {
		t.Fatalf("first page: %d keys, Truncated %v; want %d, true", len(first.Objects), first.Truncated, storage.MaxListLimit)
	}
	last := first.Objects[len(first.Objects)-1].Key
	second, err := s.List(ctx, "page/", storage.ListOptions{StartAfter: last})
	if err != nil {
		t.Fatalf("List after %s: %v", last, err)
	}
	if len(second.Objects) != n-storage.MaxListLimit || second.Truncated {
		t.Fatalf("second page: %d keys, Truncated %v; want %d, false", len(second.Objects), second.Truncated, n-storage.MaxListLimit)
	}
	var got []string
	for _, o := range append(first.Objects, second.Objects...) {
		got = append(got, o.Key)
		if o.ETag != etags[o.Key] || o.Size != int64(len(o.Key)) {
			t.Fatalf("listed %+v, want ETag %s and Size %d", o, etags[o.Key], len(o.Key))
		}
	}
	objCheckKeys(t, "two manual pages", got, keys)

	// storage.Walk, with the default page size and with odd-sized pages.
	for _, size := range []int{0, 333} {
		var walked []string
		for o, err := range storage.Walk(ctx, s, "page/", "", size) {
			if err != nil {
				t.Fatalf("Walk page size %d: %v", size, err)
			}
			walked = append(walked, o.Key)
		}
		objCheckKeys(t, fmt.Sprintf("Walk page size %d", size), walked, keys)
	}
	var tail []string
	for o, err := range storage.Walk(ctx, s, "page/", keys[n-5], 2) {
		if err != nil {
			t.Fatalf("Walk from %s: %v", keys[n-5], err)
		}
		tail = append(tail, o.Key)
	}
	objCheckKeys(t, "Walk of the last 4 keys", tail, keys[n-4:])
}
