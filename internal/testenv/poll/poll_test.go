package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestUntil: at once when the condition holds, the condition's error when
// it fails, ctx's when ctx ends, and a timeout carrying the last reason.
func TestUntil(t *testing.T) {
	ctx := context.Background()
	if err := Until(ctx, 0, time.Hour, func() (bool, string, error) { return true, "", nil }); err != nil {
		t.Fatalf("a condition that holds: %v", err)
	}
	boom := errors.New("boom")
	if err := Until(ctx, time.Hour, time.Millisecond, func() (bool, string, error) { return false, "", boom }); !errors.Is(err, boom) {
		t.Fatalf("Until = %v, want the condition's error", err)
	}
	n := 0
	if err := Until(ctx, time.Hour, time.Millisecond, func() (bool, string, error) { n++; return n == 3, "", nil }); err != nil || n != 3 {
		t.Fatalf("Until = %v after %d checks, want nil after 3", err, n)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Until(cctx, time.Hour, time.Hour, func() (bool, string, error) { return false, "", nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Until with an ended context = %v", err)
	}
	err := Until(ctx, 20*time.Millisecond, time.Millisecond, func() (bool, string, error) { return false, "3 of 4", nil })
	if !errors.Is(err, ErrTimeout) || err.Error() != "timed out after 20ms: 3 of 4" {
		t.Fatalf("Until = %v", err)
	}
}

type fakeTB struct{ failed string }

func (*fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f)
}

// TestFor: For returns once the condition holds and fails the test,
// naming what it waited for, when it does not.
func TestFor(t *testing.T) {
	n := 0
	For(t, "the third check", time.Hour, func() bool { n++; return n == 3 })
	f := &fakeTB{}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(f) {
				panic(r)
			}
		}()
		For(f, "nothing", 10*time.Millisecond, func() bool { return false })
	}()
	if f.failed != "timed out after 10ms waiting for nothing" {
		t.Fatalf("For failed with %q", f.failed)
	}
}
