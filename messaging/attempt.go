package messaging

// An attempt is one try of a call at the owner the routing table names:
// straight to the local Deliverer when this runner owns the shard, else
// on one of the pooled connection's streams (or one unary Call, for a
// runner without streams). Its result says whether the loop in run may
// try again (see result).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/messaging/internal/callpb"
	"github.com/tenurehq/tenure/routing"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func (c *Client) attempt(ctx context.Context, cl *call, owner routing.Owner) ([]byte, result, error) {
	if c.opts.local != nil && owner.RunnerID == c.opts.self {
		cl.local = true
		return c.attemptLocal(ctx, cl, owner)
	}
	cl.local = false
	if owner.Addr == "" {
		return nil, notSent, fmt.Errorf("messaging: runner %s holds shard %s but advertises no call address", owner.RunnerID, cl.shard)
	}
	return c.attemptRemote(ctx, cl, owner)
}

func (c *Client) attemptLocal(ctx context.Context, cl *call, owner routing.Owner) ([]byte, result, error) {
	out, err := c.opts.local.Deliver(ctx, entity.Delivery{
		Message: entity.Message{Type: cl.typ, ID: cl.id, Op: cl.op, Body: cl.body, OneWay: cl.kind == kindSend},
		Shard:   cl.shard,
		Epoch:   owner.Epoch,
	})
	if err != nil {
		// Only past the common case: errors.As makes its target escape,
		// an allocation on every call otherwise.
		var r *entity.RefusedError
		if errors.As(err, &r) {
			return nil, refused, r
		}
		ce := c.callError(cl, failureOf(ctx, cl.typ, err))
		if ce.Code == callpb.Failure_CODE_UNAVAILABLE {
			return nil, retried, ce
		}
		return nil, finished, ce
	}
	if len(out) > c.cfg.MaxMessageBytes {
		return nil, finished, c.callError(cl, failureOf(ctx, cl.typ, &TooLargeError{What: "reply", Size: len(out), Limit: c.cfg.MaxMessageBytes}))
	}
	return out, finished, nil
}

func (c *Client) attemptRemote(ctx context.Context, cl *call, owner routing.Owner) ([]byte, result, error) {
	pc, err := c.pool.get(owner.Addr)
	if errors.Is(err, ErrClosed) {
		return nil, finished, err
	}
	if err != nil {
		return nil, notSent, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	req := &callpb.CallRequest{Type: cl.typ, Id: cl.id, Group: cl.group, Payload: cl.body,
		Epoch: owner.Epoch, OneWay: cl.kind == kindSend, Trace: cl.trace, Op: cl.op}
	var (
		rep *callpb.CallReply
		res result
	)
	if pc.unary.Load() {
		rep, res, err = c.callUnary(ctx, cl, owner, pc, req)
	} else {
		rep, res, err = c.callStream(ctx, cl, owner, pc, req)
	}
	if err != nil {
		return nil, res, err
	}
	switch o := rep.GetOutcome().(type) {
	case *callpb.CallReply_Payload:
		return o.Payload, finished, nil
	case *callpb.CallReply_Refusal:
		r := o.Refusal
		return nil, refused, &refusalHint{
			RefusedError: &entity.RefusedError{Reason: entity.RefusalReason(reasonLabel(r.Reason)), Shard: cl.shard, Epoch: r.HeldEpoch},
			owner:        routing.Owner{RunnerID: r.OwnerRunnerId, Addr: r.OwnerAddress, Epoch: r.OwnerEpoch},
		}
	case *callpb.CallReply_Failure:
		ce := c.callError(cl, o.Failure)
		if ce.Code == callpb.Failure_CODE_UNAVAILABLE {
			return nil, retried, ce
		}
		return nil, finished, ce
	}
	return nil, finished, fmt.Errorf("%w: call %s/%s: runner %s replied without an outcome this client knows", ErrOutcomeUnknown, cl.typ, cl.id, owner.RunnerID)
}

// callUnary makes the attempt with one unary Call, for a runner that
// serves no Stream.
func (c *Client) callUnary(ctx context.Context, cl *call, owner routing.Owner, pc *poolConn, req *callpb.CallRequest) (*callpb.CallReply, result, error) {
	// The write sequence is read before grpc can queue the request: the
	// request's bytes are written after, under higher numbers (sendProbe).
	probe := &sendProbe{before: pc.writes.Load()}
	// WaitForReady(false): with no ready connection the call fails at once,
	// before sending, instead of queueing on a runner that may be gone;
	// the loop then waits on the table, which knows better.
	rep, err := pc.client.Call(context.WithValue(ctx, sentKey{}, probe), req, grpc.WaitForReady(false))
	if err != nil {
		if probe.peerClosedBeforeWrite() {
			return nil, notSent, fmt.Errorf("messaging: call %s/%s to runner %s at %s: %w: %w (%w)", cl.typ, cl.id, owner.RunnerID, owner.Addr, ErrNotSent, errNotWritten, err)
		}
		if probe.unsent() {
			return nil, notSent, fmt.Errorf("messaging: call %s/%s to runner %s at %s: %w: %w", cl.typ, cl.id, owner.RunnerID, owner.Addr, ErrNotSent, err)
		}
		ctxErr := context.Cause(ctx)
		if ctxErr == nil {
			// gRPC's own deadline timer can fire just before ctx's: its
			// status is then the first sign of the deadline.
			switch status.Code(err) {
			case grpccodes.DeadlineExceeded:
				ctxErr = context.DeadlineExceeded
			case grpccodes.Canceled:
				ctxErr = context.Canceled
			}
		}
		return nil, finished, c.unknown(cl, owner, ctxErr, err)
	}
	return rep, finished, nil
}

// callStream makes the attempt on one of pc's streams: it queues the
// request and waits for its answer or ctx's end.
func (c *Client) callStream(ctx context.Context, cl *call, owner routing.Owner, pc *poolConn, req *callpb.CallRequest) (*callpb.CallReply, result, error) {
	p := pendings.Get().(*pending)
	p.req.Request = req
	p.req.TimeoutMicros = 0
	if dl, ok := ctx.Deadline(); ok {
		// Rounded up, and at least 1: an expired deadline still is one.
		p.req.TimeoutMicros = max(1, int64((time.Until(dl)+time.Microsecond-1)/time.Microsecond))
	}
	var s *callStream
	for {
		var err error
		if s, err = pc.stream(c.pool.limit); err != nil {
			pendings.Put(p)
			return nil, notSent, fmt.Errorf("messaging: call %s/%s to runner %s at %s: %w: %w", cl.typ, cl.id, owner.RunnerID, owner.Addr, ErrNotSent, err)
		}
		if s.enqueue(p) {
			break
		}
		// The stream ended between the pick and the queueing: its slot
		// is empty already, and the next pick opens another — unless it
		// ended because the runner serves no Stream.
		pc.release(s)
		if pc.unary.Load() {
			p.req.Request = nil
			pendings.Put(p)
			return c.callUnary(ctx, cl, owner, pc, req)
		}
	}
	var r streamResult
	select {
	case r = <-p.ch:
	case <-ctx.Done():
		r = s.abandon(p)
		if r.err == nil {
			r.err = context.Cause(ctx)
		}
	}
	if !r.held {
		// Answered (the runner read the frame: its marshalling is
		// over), or never handed to the writer.
		p.req.Request = nil
		pendings.Put(p)
	}
	switch r.state {
	case stateReplied:
		return r.reply, finished, nil
	case stateNotSent:
		if r.unsent {
			return nil, notSent, fmt.Errorf("messaging: call %s/%s to runner %s at %s: %w: %w (%w)", cl.typ, cl.id, owner.RunnerID, owner.Addr, ErrNotSent, errNotWritten, r.err)
		}
		return nil, notSent, fmt.Errorf("messaging: call %s/%s to runner %s at %s: %w: %w", cl.typ, cl.id, owner.RunnerID, owner.Addr, ErrNotSent, r.err)
	}
	return nil, finished, c.unknown(cl, owner, context.Cause(ctx), r.err)
}

// unknown is the error of an attempt that may have reached the owner and
// got no answer: ctxErr, when the caller's context ended, is what ended
// it.
func (c *Client) unknown(cl *call, owner routing.Owner, ctxErr, err error) error {
	if ctxErr != nil {
		if errors.Is(err, ctxErr) {
			return fmt.Errorf("%w: call %s/%s to runner %s at %s: %w", ErrOutcomeUnknown, cl.typ, cl.id, owner.RunnerID, owner.Addr, ctxErr)
		}
		return fmt.Errorf("%w: call %s/%s to runner %s at %s: %w (%v)", ErrOutcomeUnknown, cl.typ, cl.id, owner.RunnerID, owner.Addr, ctxErr, err)
	}
	return fmt.Errorf("%w: call %s/%s to runner %s at %s: %w", ErrOutcomeUnknown, cl.typ, cl.id, owner.RunnerID, owner.Addr, err)
}

func (c *Client) callError(cl *call, f *callpb.Failure) *CallError {
	e := &CallError{Type: cl.typ, ID: cl.id, Code: f.Code, Message: f.Message, applied: appliedOf(f)}
	if f.Code == callpb.Failure_CODE_APPLICATION {
		e.App = &entity.AppError{Code: f.AppCode, Message: f.Message, Details: f.Details, Status: int(f.Status)}
		if len(e.App.Details) == 0 {
			e.App.Details = nil
		}
	}
	return e
}
