package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/testenv/poll"
)

// ErrTimeout is returned by Await when the condition did not hold in time.
var ErrTimeout = poll.ErrTimeout

// Await calls cond every interval until it reports done, and returns nil.
// It returns cond's error at once, ctx's when ctx ends, and after within an
// error wrapping ErrTimeout with cond's last reason why not: a condition
// with a deadline, never a bare sleep. It is poll.Until, its errors named
// as the harness's.
func Await(ctx context.Context, within, every time.Duration, cond func() (done bool, why string, err error)) error {
	err := poll.Until(ctx, within, every, cond)
	if errors.Is(err, ErrTimeout) {
		return fmt.Errorf("harness: %w", err)
	}
	return err
}
