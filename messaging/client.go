package messaging

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/shardkey"
	"github.com/tenurehq/tenure/messaging/internal/callpb"
	"github.com/tenurehq/tenure/routing"
	"github.com/tenurehq/tenure/storage"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

const tracerName = "github.com/tenurehq/tenure/messaging"

const (
	kindCall = "call"
	kindSend = "send"
)

// Client routes calls and sends to the runner holding each entity's shard,
// as its routing table sees it, and follows the shard when it moves. It
// implements entity.Caller and is safe for concurrent use.
type Client struct {
	table   *routing.Table
	cfg     Config
	opts    options
	pool    *pool
	metrics *clientMetrics
	tracer  trace.Tracer
	spans   spanMode
	closed  atomic.Bool
	// placed keeps the group of each hosted type PlaceType answered, for
	// as long as the table's TypesGeneration stays: a call reads it
	// without the table's lock. Only hosted types are kept, so callers
	// naming random types cannot grow it.
	placed sync.Map // type → *placedType
}

// placedType is a kept answer of routing.Table.PlaceType.
type placedType struct {
	gen   uint64
	group string
}

var _ entity.Caller = (*Client)(nil)

// NewClient returns a Client routing on table. Options: WithLocal,
// WithTLS, WithLogger, WithRegisterer, WithTracerProvider.
func NewClient(table *routing.Table, cfg Config, opts ...Option) (*Client, error) {
	if table == nil {
		return nil, fmt.Errorf("%w: nil routing table", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{table: table, cfg: cfg, opts: newOptions(opts)}
	if c.opts.local != nil && c.opts.self == "" {
		return nil, fmt.Errorf("%w: WithLocal: empty runner id", ErrInvalidConfig)
	}
	c.pool = newPool(c.opts.tls, cfg.wireLimit(), cfg.IdleConnTimeout)
	c.metrics = newClientMetrics(c.opts.registry)
	c.tracer = c.opts.tracer.Tracer(tracerName)
	c.spans = spanModeOf(c.opts.tracer)
	return c, nil
}

// Close closes the pooled connections; calls made afterwards fail with
// ErrClosed, and calls in flight on a connection fail unknown.
func (c *Client) Close() error {
	c.closed.Store(true)
	c.pool.close()
	return nil
}

// Call delivers body to the entity (typ, id) and returns its reply. The
// entity lives in the shard group whose runners host typ (see the package
// documentation, Placement by type). See the package documentation for when it retries
// and what its errors mean.
func (c *Client) Call(ctx context.Context, typ, id string, body []byte) ([]byte, error) {
	return c.do(ctx, kindCall, typ, id, "", body)
}

// Send delivers body to the entity (typ, id) and returns once its owner
// has accepted it, without waiting for the handler. It is retried under
// the rules of Call.
func (c *Client) Send(ctx context.Context, typ, id string, body []byte) error {
	_, err := c.do(ctx, kindSend, typ, id, "", body)
	return err
}

// Invoke delivers m: a call of the operation m.Op of the entity (m.Type,
// m.ID), or a send if m.OneWay (its reply is then nil). It is retried
// under the rules of Call.
func (c *Client) Invoke(ctx context.Context, m *entity.Message) ([]byte, error) {
	kind := kindCall
	if m.OneWay {
		kind = kindSend
	}
	return c.do(ctx, kind, m.Type, m.ID, m.Op, m.Body)
}

// call is one Call or Send across its attempts.
type call struct {
	kind, typ, id string
	op            string // the operation; "" is the type's default
	group         string // the shard group the type is placed in
	body          []byte
	shard         storage.ShardID
	trace         map[string]string
	attempts      int
	local         bool
	epoch         int64 // of the last attempt
	last          error // why the last attempt did not finish the call
}

func (c *Client) do(ctx context.Context, kind, typ, id, op string, body []byte) ([]byte, error) {
	start := time.Now()
	cl := &call{kind: kind, typ: typ, id: id, op: op, body: body}
	var reply []byte
	err := c.check(cl)
	if err == nil {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.cfg.DefaultTimeout)
			defer cancel()
		}
		err = c.place(ctx, cl)
	}
	if err == nil {
		var span trace.Span
		ctx, span, cl.trace = c.startSpan(ctx)
		reply, err = c.run(ctx, cl)
		c.endSpan(span, cl, err)
	}
	c.metrics.observe(kind, outcomeOf(err), cl.local, time.Since(start).Seconds())
	return reply, err
}

// check rejects what no owner could accept, before routing.
func (c *Client) check(cl *call) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if f := checkNames(cl.typ, cl.id, c.cfg.Group, cl.op); f != nil {
		return c.callError(cl, f)
	}
	if len(cl.body) > c.cfg.MaxMessageBytes {
		return &TooLargeError{What: "request", Size: len(cl.body), Limit: c.cfg.MaxMessageBytes}
	}
	return nil
}

// place finds the shard group of cl's type and computes its shard there.
// It waits for the table's first listing (or ctx's end): before it, the
// view has no runner, and a type hosted in another group would be routed
// to the Config's.
func (c *Client) place(ctx context.Context, cl *call) error {
	select {
	case <-c.table.Ready():
	default:
		if err := c.table.WaitReady(ctx); err != nil {
			return fmt.Errorf("messaging: call %s/%s: the routing table has no view of the cluster yet: %w: %w", cl.typ, cl.id, ErrNoOwner, err)
		}
	}
	group, h := c.placeType(cl.typ)
	switch {
	case h == routing.NotHosted:
		return &CallError{Type: cl.typ, ID: cl.id, Code: callpb.Failure_CODE_TYPE_NOT_HOSTED, applied: AppliedNo,
			Message: fmt.Sprintf("no runner of the cluster hosts entity type %q: every runner lists the types it hosts, and none lists it (are its runners deployed?)", cl.typ)}
	case group == "":
		group = c.cfg.Group
	}
	cl.group = group
	cl.shard = shardkey.Of(group, c.cfg.Shards, cl.typ, cl.id, "")
	return nil
}

// placeType is table.PlaceType(typ, the client's group), kept while the
// table's runners do not change.
func (c *Client) placeType(typ string) (string, routing.Hosting) {
	gen := c.table.TypesGeneration()
	if v, ok := c.placed.Load(typ); ok {
		if p := v.(*placedType); p.gen == gen {
			return p.group, routing.Hosted
		}
	}
	group, h := c.table.PlaceType(typ, c.cfg.Group)
	if h == routing.Hosted {
		c.placed.Store(typ, &placedType{gen: gen, group: group})
	}
	return group, h
}

func (c *Client) endSpan(span trace.Span, cl *call, err error) {
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("tenure.entity.type", cl.typ), attribute.String("tenure.entity.id", cl.id),
			attribute.String("tenure.shard", cl.shard.String()), attribute.Int64("tenure.epoch", cl.epoch),
			attribute.Int("tenure.attempts", cl.attempts), attribute.String("tenure.outcome", outcomeOf(err)))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

func outcomeOf(err error) string {
	if err == nil {
		// Before the error's target is declared: errors.As makes it
		// escape, an allocation on every call otherwise.
		return outcomeOK
	}
	var ae *entity.AppError
	switch {
	case errors.As(err, &ae):
		return outcomeApplication
	case errors.Is(err, entity.ErrRefused):
		// Refused until its deadline: the refusal is what the caller
		// needs to see (the error also matches the deadline).
		return outcomeRefused
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// Before unknown: a call whose deadline passed after it was sent
		// is unknown to its caller too (the error matches both), but it
		// counts as what ended it.
		return outcomeTimeout
	case errors.Is(err, ErrOutcomeUnknown), errors.Is(err, entity.ErrInterrupted):
		return outcomeUnknown
	}
	return outcomeError
}

// result says what an attempt proved.
type result int

const (
	finished result = iota // a reply, or an error Retryable does not accept
	refused                // the owner did not start it: route again
	notSent                // the request never left this process: route again
	retried                // the owner could not activate the entity: try again
)

// run makes attempts until one finishes or ctx ends: it sends a call
// again only when Retryable says its attempt did not start. It routes on
// the table's owner, or on a refusal's hint when that names a newer
// holder; between attempts it waits for the table to name another holder
// than the one that failed, at most a jittered backoff.
func (c *Client) run(ctx context.Context, cl *call) ([]byte, error) {
	var (
		owner  routing.Owner
		hinted bool
		bo     *backoff.ExponentialBackOff
	)
	for {
		if !hinted {
			o, ok := c.table.Owner(cl.shard)
			if !ok {
				c.metrics.reroutes.WithLabelValues(rerouteNoOwner).Inc()
				var err error
				if o, err = c.table.AwaitOwner(ctx, cl.shard, 0); err != nil {
					return nil, c.giveUp(ctx, cl, err)
				}
			}
			owner = o
		}
		hinted = false
		cl.attempts++
		cl.epoch = owner.Epoch
		reply, res, err := c.attempt(ctx, cl, owner)
		if err == nil || !Retryable(err) {
			return reply, err
		}
		switch res {
		case refused:
			var r *entity.RefusedError
			if errors.As(err, &r) {
				c.metrics.reroutes.WithLabelValues(string(r.Reason)).Inc()
			}
			var hint routing.Owner
			hint, hinted = hintOf(err, owner)
			if hinted {
				owner = hint
			}
		case notSent:
			c.metrics.reroutes.WithLabelValues(rerouteNotSent).Inc()
		case retried:
			c.metrics.reroutes.WithLabelValues(rerouteUnavailable).Inc()
		}
		cl.last = err
		if hinted {
			continue
		}
		if bo == nil {
			bo = backoff.NewExponentialBackOff()
			bo.InitialInterval, bo.MaxInterval = c.cfg.MinBackoff, c.cfg.MaxBackoff
		}
		if err := c.awaitMove(ctx, cl.shard, owner.Epoch, bo.NextBackOff()); err != nil {
			return nil, c.giveUp(ctx, cl, err)
		}
	}
}

// awaitMove waits until the table names a holder of shard under another
// epoch than epoch, or d passes; it returns an error only when ctx ends.
func (c *Client) awaitMove(ctx context.Context, shard storage.ShardID, epoch int64, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if _, err := c.table.AwaitOwner(wctx, shard, epoch); err != nil {
		<-wctx.Done() // the table stopped: wait out d rather than spin
	}
	return ctx.Err()
}

// giveUp is the error of a call whose deadline ended between attempts: it
// wraps the reason the last attempt did not finish (a refusal, an
// unreachable owner) and ctx's error.
func (c *Client) giveUp(ctx context.Context, cl *call, err error) error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = err
	}
	var ce *CallError
	switch {
	case cl.last == nil:
		return fmt.Errorf("messaging: call %s/%s: no runner holds shard %s: %w: %w", cl.typ, cl.id, cl.shard, ErrNoOwner, cause)
	case errors.Is(cl.last, entity.ErrRefused):
		return fmt.Errorf("messaging: call %s/%s: gave up after %d attempts: %w: %w", cl.typ, cl.id, cl.attempts, cl.last, cause)
	case errors.As(cl.last, &ce):
		// The owner could not start it (its entity not activated, or the
		// deadline before its turn): that is the answer.
		return cl.last
	}
	return fmt.Errorf("messaging: call %s/%s: gave up after %d attempts: %w: %w (last: %w)", cl.typ, cl.id, cl.attempts, ErrNoOwner, cause, cl.last)
}

// hintOf returns the holder a refusal names, when it is newer than the one
// the call was routed to: the refusing runner has seen the move already.
func hintOf(err error, routed routing.Owner) (routing.Owner, bool) {
	var h *refusalHint
	if errors.As(err, &h) && h.owner.Epoch > routed.Epoch && h.owner.Addr != "" {
		return h.owner, true
	}
	return routing.Owner{}, false
}

// refusalHint is a remote refusal with the holder the refusing runner
// named; it unwraps to the *entity.RefusedError.
type refusalHint struct {
	*entity.RefusedError
	owner routing.Owner
}

func (h *refusalHint) Unwrap() error { return h.RefusedError }
