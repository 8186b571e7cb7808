package task

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// SubmitRequest describes a task to submit. Zero fields take the client's
// defaults.
type SubmitRequest struct {
	// ID, optional, makes Submit idempotent: submitting the same id, type,
	// entity and input again returns the existing task. Empty: a new
	// UUIDv7. See ValidateID. An id is scoped to its shard: reusing it with
	// another type or entity that hashes elsewhere makes another task.
	ID string
	// Type names the handler; see ValidateType. Required.
	Type string
	// Entity, optional, addresses the task to one entity (see ValidateEntity).
	Entity string
	// Op, optional, names the operation of the entity type that runs the
	// task (see entity.Define); empty runs its default operation. See
	// ValidateOp.
	Op string
	// Input is the handler's argument: valid JSON or empty, at most the
	// store's MaxInputSize bytes.
	Input json.RawMessage
	// Delay postpones the task by this much from now (S3 time). Must not be
	// negative; at most one of Delay and AvailableAt.
	Delay time.Duration
	// AvailableAt postpones the task to this S3 time; a time in the past
	// means now.
	AvailableAt time.Time
	// MaxAttempts, Timeout and Retry override the client's defaults.
	MaxAttempts int
	Timeout     time.Duration
	Retry       *RetryPolicy
}

func (c *Client) validate(req SubmitRequest) error {
	if req.ID != "" {
		if err := ValidateID(req.ID); err != nil {
			return err
		}
	}
	if err := ValidateType(req.Type); err != nil {
		return err
	}
	if err := ValidateEntity(req.Entity); err != nil {
		return err
	}
	if err := ValidateOp(req.Op); err != nil {
		return err
	}
	if limit := c.store.opts.MaxInputSize; len(req.Input) > limit {
		return &InputTooLargeError{Size: len(req.Input), Limit: limit}
	}
	if err := validateJSON("input", req.Input); err != nil {
		return err
	}
	switch {
	case req.Delay < 0:
		return &ValidationError{Field: "SubmitRequest.Delay", Value: req.Delay.String(), Rule: "must not be negative"}
	case req.Delay > 0 && !req.AvailableAt.IsZero():
		return &ValidationError{Field: "SubmitRequest.AvailableAt", Value: req.AvailableAt.String(), Rule: "give Delay or AvailableAt, not both"}
	case req.AvailableAt.After(maxDue):
		return &ValidationError{Field: "SubmitRequest.AvailableAt", Value: req.AvailableAt.String(), Rule: "must be before the year 10000"}
	case req.MaxAttempts < 0:
		return &ValidationError{Field: "SubmitRequest.MaxAttempts", Value: fmt.Sprint(req.MaxAttempts), Rule: "must not be negative"}
	case req.Timeout < 0:
		return &ValidationError{Field: "SubmitRequest.Timeout", Value: req.Timeout.String(), Rule: "must not be negative"}
	}
	if req.Retry != nil {
		if err := req.Retry.Validate(); err != nil {
			return fmt.Errorf("SubmitRequest.Retry: %w", err)
		}
	}
	return nil
}

// Submit makes a task durable and tells its shard's owner. It returns the
// task and whether this call created it.
//
// The order is what makes a crash at any point safe:
//
//  1. write the ready pointer, so that a task never exists without one (a
//     pointer without a task is cleaned up by the shard owner);
//  2. create the task object with If-None-Match: the task is durable once
//     this succeeds;
//  3. wake the owner, best effort: a failed wake-up is logged and recorded
//     on the span, never returned, since the task starts at the owner's
//     next reconciliation anyway and an error would invite a duplicate
//     submit The note carries the object just written and its ETag
//     (for a small task; see FormatWakeNote), so that the owner can claim
//     it with a conditional write without reading it first.
//
// If the id is taken (a caller-given id): a task with the same type, entity
// and input (compared as JSON values) is returned with created = false; a
// different one gives a *ConflictError (ErrConflict). This call's pointer is
// then deleted unless it is the existing task's.
//
// When step 2 fails for another reason the task may or may not exist (a
// response lost after the write): Submit returns the task it tried to
// create along with the error, and resubmitting with that task's ID is
// safe.
//
// Submit runs in a span "tenure.task.submit" whose W3C traceparent the task
// keeps in Trace, so that claim and execution spans can link to it.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (_ *Task, created bool, err error) {
	ctx, span := c.tracer.Start(ctx, "tenure.task.submit", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("tenure.task.type", req.Type)))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	if err := c.validate(req); err != nil {
		return nil, false, err
	}
	now, err := c.store.Now(ctx)
	if err != nil {
		return nil, false, err
	}
	t := c.newTask(ctx, req, now.Now)
	span.SetAttributes(attribute.String("tenure.task.ref", t.Ref()))

	if err := c.store.PutPointer(ctx, t); err != nil {
		return nil, false, err
	}
	hint, err := c.store.create(ctx, t)
	if errors.Is(err, ErrExists) {
		return c.existing(ctx, t)
	}
	if err != nil {
		return t, false, err
	}
	c.wake(ctx, t, &hint)
	return t, true, nil
}

// notBeforeLast returns now, or the time this client last submitted at if
// that is later, and records the result. A shard starts its tasks without
// an entity in ready pointer order (due time, then id), and an undelayed
// task is due at its submission time, the submitter's estimate of the S3
// clock, which steps back (by milliseconds, more while it is young) when
// a new Date header narrows it. Without this, one submitter's later task
// could be due, and start, before its earlier one; with it, one client's
// submission times never run backwards, so its undelayed tasks are due in
// submission order and its ids, which grow in the process, order the
// ties. A submission time so held can be ahead of the estimate by as much
// as the estimate stepped back, within the estimate's uncertainty.
func (c *Client) notBeforeLast(now time.Time) time.Time {
	ns := now.UnixNano()
	for {
		last := c.lastSubmit.Load()
		if ns <= last {
			return time.Unix(0, last).UTC()
		}
		if c.lastSubmit.CompareAndSwap(last, ns) {
			return now
		}
	}
}

// newTask builds the pending task req describes.
func (c *Client) newTask(ctx context.Context, req SubmitRequest, now time.Time) *Task {
	d := c.defaults
	if req.MaxAttempts > 0 {
		d.MaxAttempts = req.MaxAttempts
	}
	if req.Timeout > 0 {
		d.Timeout = req.Timeout
	}
	if req.Retry != nil {
		d.Retry = *req.Retry
	}
	id := req.ID
	if id == "" {
		id = NewID()
	}
	now = c.notBeforeLast(now.UTC())
	avail := now.Add(req.Delay)
	if !req.AvailableAt.IsZero() && req.AvailableAt.After(now) {
		avail = req.AvailableAt
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	t := &Task{
		ID:          id,
		Type:        req.Type,
		Entity:      req.Entity,
		Op:          req.Op,
		Shard:       ShardOf(c.cfg.Group, c.cfg.Shards, req.Type, req.Entity, id),
		Input:       bytes.Clone(req.Input),
		Status:      Pending,
		MaxAttempts: d.MaxAttempts,
		Timeout:     Duration(d.Timeout),
		Retry:       d.Retry,
		AvailableAt: ceilMilli(avail),
		CreatedAt:   now,
		Trace:       carrier["traceparent"],
	}
	c.store.Configure(t)
	t.record(now, EventSubmitted, "", "")
	return t
}

// existing resolves a Submit whose id is taken.
func (c *Client) existing(ctx context.Context, mine *Task) (*Task, bool, error) {
	cur, _, err := c.store.Load(ctx, mine.Shard, mine.ID)
	if err != nil {
		return cur, false, err
	}
	if mk := mine.PointerKey(); mk != cur.PointerKey() {
		c.deletePointer(ctx, mk)
	}
	field := ""
	switch {
	case cur.Type != mine.Type:
		field = "type"
	case cur.Entity != mine.Entity:
		field = "entity"
	case cur.Op != mine.Op:
		field = "op"
	case !sameJSON(cur.Input, mine.Input):
		field = "input"
	}
	if field != "" {
		return cur, false, &ConflictError{Ref: cur.Ref(), Field: field}
	}
	trace.SpanFromContext(ctx).AddEvent("task already submitted")
	return cur, false, nil
}

// sameJSON reports whether a and b are the same JSON value (key order and
// spacing aside; numbers compared as written). Empty equals only empty.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if decodeNumbers(a, &x) != nil || decodeNumbers(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func decodeNumbers(b []byte, v *any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// SpanContext returns the span context of the submit span stored in Trace
// (invalid when there is none), for claim and execute spans to link to or
// continue.
func (t *Task) SpanContext() trace.SpanContext {
	if t.Trace == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": t.Trace})
	return trace.SpanContextFromContext(ctx)
}
