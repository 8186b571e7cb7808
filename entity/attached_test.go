package entity

import (
	"context"
	"errors"
	"testing"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/sharding"
)

// TestAttachedChecksBeforeReporting: Attached runs the ownership's
// deadline check first (which, after a pause past the lease, detaches and
// cancels the handler's context at once) and reports the context's cause;
// an enforced claim's ended decision counts even while the handler's own
// context, ended through an AfterFunc, has not caught up.
func TestAttachedChecksBeforeReporting(t *testing.T) {
	errPaused := errors.New("detached: lease deadline passed while paused")
	own, cancelOwn := context.WithCancelCause(context.Background())
	checks := 0
	e := &shardRef{ctx: own, own: sharding.Ownership{Ctx: own, Enforcement: func() detachment.Enforcement {
		checks++
		if checks == 2 {
			cancelOwn(errPaused) // the check finds the cutoff passed
		}
		return detachment.Enforcement{Ctx: own}
	}}}
	ctx := e.withAttachmentCheck(own, nil)
	if err := Attached(ctx); err != nil || checks != 1 {
		t.Fatalf("attached: %v after %d checks, want nil after 1", err, checks)
	}
	if err := Attached(ctx); !errors.Is(err, errPaused) || checks != 2 {
		t.Fatalf("after the check detached: %v, want %v", err, errPaused)
	}

	bound, endDecision := context.WithCancelCause(context.Background())
	live := context.Background()
	e2 := &shardRef{ctx: live, own: sharding.Ownership{Ctx: live}}
	ctx2 := e2.withAttachmentCheck(live, bound)
	if err := Attached(ctx2); err != nil {
		t.Fatalf("live: %v", err)
	}
	endDecision(errEnforcedStop)
	if err := Attached(ctx2); !errors.Is(err, errEnforcedStop) {
		t.Fatalf("enforced claim's decision ended: %v, want %v", err, errEnforcedStop)
	}
	if err := Attached(context.Background()); err != nil {
		t.Fatalf("outside a handler: %v", err)
	}
}
