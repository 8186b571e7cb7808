package testenv

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv/poll"
)

const modulePath = "github.com/tenurehq/tenure/"

// CheckLeaks fails the test if, at cleanup, goroutines running this module's
// code (other than the test environment's own) outlive the test by more than
// a few seconds. Register it first so it runs after the test's other
// cleanups. Not for parallel tests: their goroutines would count.
func CheckLeaks(t testing.TB) {
	t.Helper()
	before := map[string]bool{}
	for id := range moduleGoroutines() {
		before[id] = true
	}
	t.Cleanup(func() {
		var leaked []string
		err := poll.Until(context.Background(), 5*time.Second, 20*time.Millisecond, func() (bool, string, error) {
			leaked = leaked[:0]
			for id, stack := range moduleGoroutines() {
				if !before[id] {
					leaked = append(leaked, stack)
				}
			}
			return len(leaked) == 0, "", nil
		})
		if err != nil {
			t.Errorf("testenv: %d goroutine(s) leaked:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
	})
}

// moduleGoroutines returns the stacks of goroutines that run or were started
// by this module's code outside internal/testenv (but for its harness) and
// internal/embedded, keyed by goroutine id.
func moduleGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		id, ok := strings.CutPrefix(header, "goroutine ")
		if !ok {
			continue
		}
		id, _, _ = strings.Cut(id, " ")
		if ours(g) {
			out[id] = g
		}
	}
	return out
}

func ours(stack string) bool {
	for _, line := range strings.Split(stack, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "created by "))
		if !strings.HasPrefix(line, modulePath) {
			continue
		}
		rest := strings.TrimPrefix(line, modulePath)
		// The shared servers' goroutines outlive every test; the harness's
		// (a member's Run, a lock watch) belong to the test that made them.
		if (strings.HasPrefix(rest, "internal/testenv") && !strings.HasPrefix(rest, "internal/testenv/harness")) ||
			strings.HasPrefix(rest, "internal/embedded") {
			continue
		}
		// Test functions themselves (the goroutine running this cleanup).
		if strings.Contains(rest, ".Test") || strings.Contains(rest, ".Benchmark") {
			continue
		}
		return true
	}
	return false
}
