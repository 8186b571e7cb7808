package harness

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTimeout is returned by Await when the condition did not hold in time.
var ErrTimeout = errors.New("harness: timed out")

// Await calls cond every interval until it reports done, and returns nil.
// It returns cond's error at once, ctx's when ctx ends, and after within an
// error wrapping ErrTimeout with cond's last reason why not: a condition
// with a deadline, never a bare sleep.
func Await(ctx context.Context, within, every time.Duration, cond func() (done bool, why string, err error)) error {
	deadline := time.Now().Add(within)
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
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}
