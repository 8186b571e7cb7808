package poll

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTimeout is returned by Until when the condition did not hold in time.
var ErrTimeout = errors.New("timed out")

// Every is the interval For checks its condition at: short against the
// waits tests make (hundreds of milliseconds and more), long enough that
// a condition that reads etcd or S3 does not load them.
const Every = 5 * time.Millisecond

// Until calls cond every interval until it reports done, and returns nil.
// It returns cond's error at once, ctx's when ctx ends, and after within
// an error wrapping ErrTimeout with cond's last reason why not. cond is
// called at least once, even when within is 0.
func Until(ctx context.Context, within, every time.Duration, cond func() (done bool, why string, err error)) error {
	deadline := time.Now().Add(within)
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		done, why, err := cond()
		switch {
		case err != nil:
			return err
		case done:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%w after %s: %s", ErrTimeout, within, why)
		}
		timer.Reset(every)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// TB is the part of testing.TB For uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// For checks cond every Every until it holds, and fails tb if it does not
// within the bound.
func For(tb TB, what string, within time.Duration, cond func() bool) {
	tb.Helper()
	err := Until(context.Background(), within, Every, func() (bool, string, error) { return cond(), "", nil })
	if err != nil {
		tb.Fatalf("timed out after %s waiting for %s", within, what)
	}
}
