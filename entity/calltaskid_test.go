package entity

import (
	"regexp"
	"sync"
	"testing"
)

// TestCallTaskID: a call's task id is "call-" and 32 lowercase hex digits,
// and ids made at once on many goroutines do not repeat.
func TestCallTaskID(t *testing.T) {
	form := regexp.MustCompile(`^call-[0-9a-f]{32}$`)
	const goroutines, each = 8, 5000
	ids := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				ids[g] = append(ids[g], callTaskID())
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*each)
	for _, list := range ids {
		for _, id := range list {
			if !form.MatchString(id) {
				t.Fatalf("call task id %q: want call- and 32 lowercase hex digits", id)
			}
			if seen[id] {
				t.Fatalf("call task id %q made twice", id)
			}
			seen[id] = true
		}
	}
}
