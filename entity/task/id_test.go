package task

import (
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func idBytes(t *testing.T, id string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(id, "-", ""))
	if err != nil || len(b) != 16 {
		t.Fatalf("id %q is not 16 hex bytes: %v", id, err)
	}
	return b
}

func TestNewIDFormat(t *testing.T) {
	before := time.Now().UnixMilli()
	id := NewID()
	after := time.Now().UnixMilli()
	if !uuidV7.MatchString(id) {
		t.Fatalf("NewID() = %q, not a lowercase UUIDv7", id)
	}
	b := idBytes(t, id)
	if v := b[6] >> 4; v != 7 {
		t.Fatalf("version nibble %d, want 7", v)
	}
	if v := b[8] >> 6; v != 2 {
		t.Fatalf("variant bits %b, want 10", v)
	}
	var ms int64
	for _, x := range b[:6] {
		ms = ms<<8 | int64(x)
	}
	// The counter may borrow a few milliseconds ahead under heavy use by
	// other tests; a second is far beyond that.
	if ms < before || ms > after+1000 {
		t.Fatalf("timestamp %d ms outside [%d, %d+1s]", ms, before, after)
	}
	if err := ValidateID(id); err != nil {
		t.Fatalf("a NewID is not a valid task id: %v", err)
	}
}

// TestNewIDMonotonic: ids from one process strictly increase, as strings,
// even thousands within one millisecond (the counter overflows into the
// next millisecond rather than repeating).
func TestNewIDMonotonic(t *testing.T) {
	ids := make([]string, 20000)
	for i := range ids {
		ids[i] = NewID()
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("id %d %s ≤ id %d %s", i, ids[i], i-1, ids[i-1])
		}
	}
}

// TestNewIDConcurrent: concurrent callers get unique ids, each caller's in
// increasing order, and sorting all of them puts every caller's in its own
// generation order.
func TestNewIDConcurrent(t *testing.T) {
	const workers, per = 16, 2000
	got := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]string, per)
			for i := range ids {
				ids[i] = NewID()
			}
			got[w] = ids
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for w, ids := range got {
		if !slices.IsSorted(ids) {
			t.Fatalf("worker %d's ids are not increasing", w)
		}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate id %s", id)
			}
			seen[id] = true
			if !uuidV7.MatchString(id) {
				t.Fatalf("id %q is not a UUIDv7", id)
			}
		}
	}
	if len(seen) != workers*per {
		t.Fatalf("%d unique ids, want %d", len(seen), workers*per)
	}
}
