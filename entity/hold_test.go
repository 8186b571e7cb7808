package entity

import (
	"context"
	"errors"
	"testing"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/sharding"
)

// TestAttachedHoldsUnboundWork: work not bound to a detachment decision
// (a claim made while the runner was detached is not enforced) is refused
// at its start while the runner is detached in enforce mode
// (Enforcement.Hold), before the shard's own context ends; in observe
// mode (no Hold) it goes on. This is the soak's pause case: a handler
// started 1.3 s past a paused runner's lease, 42 ms before the manager
// stopped the shard.
func TestAttachedHoldsUnboundWork(t *testing.T) {
	detached := errors.New("test: detached at the lease deadline")
	dctx, cancel := context.WithCancelCause(context.Background())
	cancel(detached)
	for _, hold := range []bool{true, false} {
		r := &shardRef{ctx: context.Background(), own: sharding.Ownership{Enforcement: func() detachment.Enforcement {
			return detachment.Enforcement{Ctx: dctx, Hold: hold}
		}}}
		err := Attached(r.withAttachmentCheck(context.Background(), nil))
		switch {
		case hold && !errors.Is(err, detached):
			t.Fatalf("held (enforce mode, detached): Attached = %v, want the detachment", err)
		case !hold && err != nil:
			t.Fatalf("not held (observe mode): Attached = %v, want nil: work goes on", err)
		}
	}
}
