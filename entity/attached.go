package entity

import (
	"context"
	"errors"
)

// errHeld is the error of work refused because its runner is detached in
// enforce mode (detachment.Enforcement.Hold).
var errHeld = errors.New("entity: the runner is detached: nothing starts until it attaches again")

// checkKey carries, in a handler's context, the check of its runner's
// attachment by the clock (see Attached).
type checkKey struct{}

// Attached reports, right before a handler has an external effect (a
// request to another service, a write, a message), whether the work may
// still act: nil while its runner is attached and owns the work's shard,
// else the context's cause. A handler that honours its context already
// stops when its runner detaches; Attached also covers the moment after
// the process was paused past its lease (SIGSTOP, a frozen VM), when every
// goroutine resumes at once and the handler's may run before the timer
// that would have cancelled its context: it detaches the runner first if
// the lease deadline − margin has passed by the clock. A process paused
// between Attached and the effect is not covered: fencing a handler's
// external effects is the handler's own business (docs/architecture.md, guarantee 1's limits). Outside a
// handler's context it reports only the context's state.
func Attached(ctx context.Context) error {
	if check, ok := ctx.Value(checkKey{}).(func() error); ok {
		if err := check(); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// withAttachmentCheck gives ctx the shard's attachment check, for
// Attached. bound, if not nil, is the detachment decision an enforced
// claim is bound to: the handler's context ends with it too, but through
// context.AfterFunc, a moment later; the check reads it directly.
func (r *shardRef) withAttachmentCheck(ctx, bound context.Context) context.Context {
	return context.WithValue(ctx, checkKey{}, func() error {
		e := r.enforcement()
		if bound != nil && bound.Err() != nil {
			return context.Cause(bound)
		}
		if e.Hold {
			// Detached in enforce mode: work not bound to the decision
			// (a claim made while detached) starts nothing either.
			if e.Ctx != nil && e.Ctx.Err() != nil {
				return context.Cause(e.Ctx)
			}
			return errHeld
		}
		return nil
	})
}
