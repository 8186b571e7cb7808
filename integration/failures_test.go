package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// failureNotes is a testing.TB that remembers every failure reported
// through it and restates them all as the test's very last output. A
// failed soak dumps the logs of its runners (tens of kilobytes) after the
// failures were reported; whoever reads only the tail of the output (a CI
// summary) must still find why it failed.
type failureNotes struct {
	testing.TB
	mu    sync.Mutex
	notes []string
}

// noteFailures wraps t. Its cleanup is registered before any other the
// test registers through the wrapper, so it runs after them all.
func noteFailures(t testing.TB) *failureNotes {
	f := &failureNotes{TB: t}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.notes) > 0 {
			t.Logf("FAILED, %d reason(s), restated after the logs above:\n  %s", len(f.notes), strings.Join(f.notes, "\n  "))
		}
	})
	return f
}

func (f *failureNotes) note(msg string) {
	f.mu.Lock()
	f.notes = append(f.notes, msg)
	f.mu.Unlock()
}

// Error records and reports a failure.
func (f *failureNotes) Error(args ...any) {
	f.TB.Helper()
	f.note(fmt.Sprint(args...))
	f.TB.Error(args...)
}

// Errorf records and reports a failure.
func (f *failureNotes) Errorf(format string, args ...any) {
	f.TB.Helper()
	f.note(fmt.Sprintf(format, args...))
	f.TB.Errorf(format, args...)
}

// Fatal records and reports a failure, and stops the test.
func (f *failureNotes) Fatal(args ...any) {
	f.TB.Helper()
	f.note(fmt.Sprint(args...))
	f.TB.Fatal(args...)
}

// Fatalf records and reports a failure, and stops the test.
func (f *failureNotes) Fatalf(format string, args ...any) {
	f.TB.Helper()
	f.note(fmt.Sprintf(format, args...))
	f.TB.Fatalf(format, args...)
}
