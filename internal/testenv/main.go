package testenv

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv/poll"
)

var (
	cleanupMu sync.Mutex
	cleanups  []func()
	seq       atomic.Int64
)

// atExit registers f to run when Main's tests have finished, in reverse
// order of registration.
func atExit(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanups = append(cleanups, f)
}

// Main runs the package's tests, then stops the shared servers and removes
// their directories. Call it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	cleanupMu.Lock()
	fs := cleanups
	cleanups = nil
	cleanupMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	os.Exit(code)
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// Name returns a name unique within the test binary, derived from the test's
// name, made of lowercase letters, digits and '-', at most maxLen long.
func Name(t testing.TB, maxLen int) string {
	n := seq.Add(1)
	suffix := "-" + strconv.FormatInt(n, 10)
	base := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if base == "" {
		base = "t"
	}
	if len(base)+len(suffix) > maxLen {
		base = strings.Trim(base[:maxLen-len(suffix)], "-")
	}
	return base + suffix
}

// WaitFor polls cond every few milliseconds until it holds, failing the
// test if it does not within the bound: a condition with a deadline, never a
// bare sleep. It is poll.For.
func WaitFor(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	poll.For(t, what, within, cond)
}
