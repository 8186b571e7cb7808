package sharding

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/storage"
)

// Ownership is this runner's hold on one shard. It is valid while Ctx is
// live: Ctx derives from the runner's attachment context and is cancelled
// the moment ownership ends (release, lost lock, detachment, stop).
type Ownership struct {
	Shard   storage.ShardID
	Epoch   int64 // the lock's creation revision: the fencing token for task claims
	LeaseID int64 // the runner lease the lock rides on
	Since   time.Time
	Ctx     context.Context
	// Enforcement tells what work started on the shard now may promise
	// about the runner's detachment: whether the runner enforces it, and
	// the decision context that such work must stay bound to (see
	// detachment.Enforcement). Task claims record the promise so that a
	// successor knows whether it may take a task over before its lease
	// lapses. Calling it first detaches the runner if its lease deadline −
	// margin has passed (a process paused past its lease), so that what it
	// returns, and every context of the ownership, is current by the clock.
	// Nil: never enforced.
	Enforcement func() detachment.Enforcement
}

// LossReason says why an ownership ended.
type LossReason string

const (
	// LossReleased: a planned release (rebalance, drain) handed it over.
	LossReleased LossReason = "released"
	// LossLockLost: the lock was deleted or is held by another lease.
	LossLockLost LossReason = "lock-lost"
	// LossDetached: the runner detached.
	LossDetached LossReason = "detached"
	// LossStopped: the manager stopped.
	LossStopped LossReason = "stopped"
)

// ErrShardLost is wrapped by the context.Cause of an ownership context
// cancelled by a loss; *LostError carries the reason.
var ErrShardLost = errors.New("sharding: shard ownership ended")

// LostError is the context.Cause of an ended ownership's context. For a
// detachment it also wraps the attachment context's cause.
type LostError struct {
	Shard  storage.ShardID
	Epoch  int64
	Reason LossReason
	Err    error
}

func (e *LostError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("sharding: shard %s (epoch %d) %s: %v", e.Shard, e.Epoch, e.Reason, e.Err)
	}
	return fmt.Sprintf("sharding: shard %s (epoch %d) %s", e.Shard, e.Epoch, e.Reason)
}

// Unwrap returns ErrShardLost and the underlying cause.
func (e *LostError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrShardLost, e.Err}
	}
	return []error{ErrShardLost}
}

// Handler hosts the shards this runner owns. The manager calls it one call
// at a time, in the order ownership changed, so a shard's ShardAcquired is
// always seen before its end.
type Handler interface {
	// ShardAcquired starts hosting o; its work must run under o.Ctx. It must
	// not block.
	ShardAcquired(o Ownership)
	// ShardReleasing hands o over in a planned release. o.Ctx is already
	// cancelled; stop the shard's work and requeue what is in flight using
	// ctx, which stays live while the lock is held and the runner attached
	// and is bounded by Config.InterruptTimeout. The lock is deleted when it
	// returns.
	ShardReleasing(ctx context.Context, o Ownership)
	// ShardLost ends o without a handoff (lost lock, detachment, stop):
	// o.Ctx is cancelled and in-flight work is left to the next owner's
	// takeover.
	ShardLost(o Ownership, reason LossReason)
}

// Quiescer is implemented by a Handler that can tell when the work of the
// shards it was told it lost has stopped. On stop the Manager waits for it,
// bounded by Config.InterruptTimeout, before revoking the lease: revoking
// frees every lock at once, and a successor must not get a shard whose
// handlers are still returning.
type Quiescer interface {
	// Quiesce returns once the work of every ended ownership has stopped,
	// or when ctx ends.
	Quiesce(ctx context.Context)
}

// NopHandler hosts nothing.
type NopHandler struct{}

// ShardAcquired does nothing.
func (NopHandler) ShardAcquired(Ownership) {}

// ShardReleasing does nothing.
func (NopHandler) ShardReleasing(context.Context, Ownership) {}

// ShardLost does nothing.
func (NopHandler) ShardLost(Ownership, LossReason) {}

// owned is one live ownership and its cancel function.
type owned struct {
	Ownership
	cancel context.CancelCauseFunc
}

// notice is a queued handler call.
type notice struct {
	o      Ownership
	lost   bool
	reason LossReason
}

// notifier delivers handler calls in the order they were queued: callers
// queue under the manager's lock and deliver after releasing it, and the
// delivery lock keeps two deliverers from interleaving.
type notifier struct {
	h         Handler
	mu        sync.Mutex // guards queue
	queue     []notice
	deliverMu sync.Mutex
}

func (n *notifier) push(v notice) {
	n.mu.Lock()
	n.queue = append(n.queue, v)
	n.mu.Unlock()
}

func (n *notifier) deliver() {
	n.deliverMu.Lock()
	defer n.deliverMu.Unlock()
	for {
		n.mu.Lock()
		q := n.queue
		n.queue = nil
		n.mu.Unlock()
		if len(q) == 0 {
			return
		}
		for _, v := range q {
			if v.lost {
				n.h.ShardLost(v.o, v.reason)
			} else {
				n.h.ShardAcquired(v.o)
			}
		}
	}
}

// releasing runs a planned handoff after every earlier notice has been
// delivered.
func (n *notifier) releasing(ctx context.Context, o Ownership) {
	n.deliver()
	n.deliverMu.Lock()
	defer n.deliverMu.Unlock()
	n.h.ShardReleasing(ctx, o)
}
