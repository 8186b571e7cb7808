package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tenurehq/tenure/storage"
)

// Waker tells a shard's owner that a task is ready now, so that it does not
// wait for its next reconciliation. note names the task's ready pointer and
// may carry a hint for its claim (see FormatWakeNote; ParseWakeNote reads
// it). Implementations deliver through etcd or a runner RPC, the note as an
// opaque string; a lost wake-up only delays the task.
type Waker interface {
	Wake(ctx context.Context, shard storage.ShardID, note string) error
}

// Client-side defaults.
const (
	// DefaultWakeTimeout bounds a submission's wake-up, its retries
	// included.
	DefaultWakeTimeout = 5 * time.Second
	// wakeTries is how many times a failed wake-up is tried within
	// DefaultWakeTimeout, wakeRetryPause after the first failure, four
	// times that after the second: a wake-up is lost only when etcd stays
	// unreachable across them, or the submitter dies between its writes.
	wakeTries      = 3
	wakeRetryPause = 100 * time.Millisecond
	// DefaultWaitPoll is Wait's polling ceiling when the caller gives none.
	DefaultWaitPoll = time.Second
	// CASTries bounds the compare-and-swap loops of Cancel and Replay.
	CASTries = 10
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Group is the shard group tasks are submitted to. Default
	// storage.DefaultGroup ("default").
	Group string
	// Shards is the number of shards per group, from the cluster meta.
	// Required (≥ 1): it is part of every task's placement.
	Shards int
	// Waker, optional, is told of every task made ready. Without it tasks
	// start at their shard owner's next reconciliation.
	Waker Waker
	// PlainWakeNotes makes wake-ups name the ready pointer only, without
	// the hint that lets the owner claim a submitted task without reading
	// it (see FormatWakeNote). Runners from before hints ignore a hinted
	// note, so their tasks wait for the next reconciliation: set it while
	// such runners remain (a rolling upgrade). Default false.
	PlainWakeNotes bool
	// Tracer starts the submit span whose traceparent the task keeps.
	// Default a no-op tracer (the caller's span context, if any, is still
	// recorded).
	Tracer trace.Tracer
	// Defaults fill the zero fields of a SubmitRequest; their own zero
	// fields take DefaultSubmit's values.
	Defaults SubmitDefaults
	// Logger receives best-effort failures (wake-ups, stale pointer
	// deletes). Default slog.Default().
	Logger *slog.Logger
}

// Validate names the first field out of range.
func (c ClientConfig) Validate() error {
	if c.Group != "" {
		if err := ValidateGroup(c.Group); err != nil {
			return fmt.Errorf("ClientConfig.Group: %w", err)
		}
	}
	if c.Shards < 1 {
		return &ValidationError{Field: "ClientConfig.Shards", Value: strconv.Itoa(c.Shards), Rule: "must be at least 1 (the cluster meta's shard count)"}
	}
	if err := c.Defaults.withDefaults().Validate(); err != nil {
		return fmt.Errorf("ClientConfig.Defaults: %w", err)
	}
	return nil
}

// Client submits, inspects, cancels and replays tasks. It needs only the
// object store (and optionally a Waker): any Go program can use it. It is
// safe for concurrent use.
type Client struct {
	store    *Store
	cfg      ClientConfig
	defaults SubmitDefaults
	tracer   trace.Tracer
	log      *slog.Logger
	// lastSubmit is the latest submission time (Unix ns) this client gave
	// a task; see notBeforeLast.
	lastSubmit atomic.Int64
}

// NewClient returns a Client, or a *ValidationError for a bad config.
func NewClient(store *Store, cfg ClientConfig) (*Client, error) {
	if store == nil {
		return nil, &ValidationError{Field: "store", Rule: "must not be nil"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Group == "" {
		cfg.Group = storage.DefaultGroup
	}
	c := &Client{store: store, cfg: cfg, defaults: cfg.Defaults.withDefaults(), tracer: cfg.Tracer, log: cfg.Logger}
	if c.tracer == nil {
		c.tracer = noop.NewTracerProvider().Tracer("")
	}
	if c.log == nil {
		c.log = store.opts.logger
	}
	return c, nil
}

// Group returns the shard group the client submits to.
func (c *Client) Group() string { return c.cfg.Group }

// InGroup returns a client like c (its store, shard count, waker,
// defaults) that submits to group instead.
func (c *Client) InGroup(group string) (*Client, error) {
	if err := ValidateGroup(group); err != nil {
		return nil, err
	}
	cfg := c.cfg
	cfg.Group = group
	return NewClient(c.store, cfg)
}

// Shards returns the number of shards per group the client places tasks
// with (the cluster meta's).
func (c *Client) Shards() int { return c.cfg.Shards }

// Store returns the client's Store.
func (c *Client) Store() *Store { return c.store }

// Get returns the task ref ("group/index/id"). A corrupt task object gives
// the partial task and a *CorruptError, as Store.Load does.
func (c *Client) Get(ctx context.Context, ref string) (*Task, error) {
	shard, id, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	t, _, err := c.store.Load(ctx, shard, id)
	return t, err
}

// Cancel cancels the task ref. A pending task is cancelled at once and its
// pointer deleted; a running one is marked CancelRequested and its owner
// woken, so its handler's context is cancelled now, and the task ends
// cancelled when the handler returns. Cancelling a cancelled task returns it
// unchanged; a completed or failed one gives ErrTerminal with the task.
func (c *Client) Cancel(ctx context.Context, ref string) (*Task, error) {
	shard, id, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	var last error
	for range CASTries {
		t, etag, err := c.store.Load(ctx, shard, id)
		if err != nil {
			return t, err
		}
		switch {
		case t.Status == Cancelled:
			return t, nil
		case t.Status.IsTerminal():
			return t, t.refuse("cancel", ErrTerminal, time.Time{}, "")
		case t.Status == Running && t.CancelRequested:
			c.wake(ctx, t, nil)
			return t, nil
		}
		now, err := c.store.Now(ctx)
		if err != nil {
			return nil, err
		}
		pointer := t.PointerKey()
		if err := t.RequestCancel(now.Now); err != nil {
			return t, err
		}
		if _, err := c.store.Write(ctx, t, etag); err != nil {
			if errors.Is(err, storage.ErrPrecondition) {
				last = err
				continue
			}
			return nil, err
		}
		if t.Status == Cancelled {
			c.deletePointer(ctx, pointer)
		} else {
			c.wake(ctx, t, nil)
		}
		return t, nil
	}
	return nil, &ContentionError{Op: "cancel", Ref: ref, Tries: CASTries, Last: last}
}

// Replay restarts a failed or cancelled task: pending, due now, attempts
// reset. Its new pointer is written before the task (as in Submit), then
// its owner is woken. Other statuses give ErrInvalidTransition with the
// task.
func (c *Client) Replay(ctx context.Context, ref string) (*Task, error) {
	shard, id, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	var written []string // pointers this call wrote
	var last error
	var cur *Task // the latest version read
	defer func() { c.dropStale(ctx, cur, written) }()
	for range CASTries {
		t, etag, err := c.store.Load(ctx, shard, id)
		if err != nil {
			cur = nil // the current pointer is unknown: delete nothing
			return t, err
		}
		cur = t.Clone()
		now, err := c.store.Now(ctx)
		if err != nil {
			return nil, err
		}
		if err := t.Replay(now.Now); err != nil {
			return cur, err
		}
		if err := c.store.PutPointer(ctx, t); err != nil {
			return nil, err
		}
		written = append(written, t.PointerKey())
		if _, err := c.store.Write(ctx, t, etag); err != nil {
			if errors.Is(err, storage.ErrPrecondition) {
				last = err
				continue
			}
			// Unknown outcome: the write may have landed, so the pointer
			// stays; the owner's reconciliation removes it if not.
			written = nil
			return nil, err
		}
		cur = t
		c.wake(ctx, t, nil)
		return t, nil
	}
	return nil, &ContentionError{Op: "replay", Ref: ref, Tries: CASTries, Last: last}
}

// dropStale deletes, best effort, the pointers this call wrote that are not
// the current task's: they would only send its owner to a task they do not
// describe.
func (c *Client) dropStale(ctx context.Context, cur *Task, written []string) {
	if cur == nil {
		return
	}
	keep := cur.PointerKey()
	for _, k := range written {
		if k != keep {
			c.deletePointer(ctx, k)
		}
	}
}

func (c *Client) deletePointer(ctx context.Context, key string) {
	if err := c.store.DeletePointer(ctx, key); err != nil {
		c.log.Warn("task: could not delete a stale ready pointer; the shard owner's reconciliation will", "key", key, "err", err)
	}
}

// wake tells the task's owner, best effort and bounded by
// DefaultWakeTimeout: the task is durable already, and a lost wake-up only
// delays it to the owner's next reconciliation (up to
// entity.reconcile_max_interval on an idle shard), so a failed one is
// tried again, up to wakeTries times within the timeout, and a last
// failure is logged, not returned. A wake-up sent twice is harmless: the
// owner queues a task once. hint, if not nil, is the version of t just
// written, for the owner to claim without reading it.
func (c *Client) wake(ctx context.Context, t *Task, hint *WakeHint) {
	if c.cfg.Waker == nil {
		return
	}
	if c.cfg.PlainWakeNotes {
		hint = nil
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultWakeTimeout)
	defer cancel()
	note := FormatWakeNote(t.PointerKey(), hint)
	err := c.cfg.Waker.Wake(ctx, t.Shard, note)
	tries := 1
	for pause := wakeRetryPause; err != nil && tries < wakeTries; pause *= 4 {
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
		if ctx.Err() != nil {
			break
		}
		err = c.cfg.Waker.Wake(ctx, t.Shard, note)
		tries++
	}
	if err != nil {
		trace.SpanFromContext(ctx).AddEvent("wake failed")
		c.log.Warn("task: wake-up failed; the task starts at its shard owner's next reconciliation",
			"task", t.Ref(), "tries", tries, "err", err)
	}
}
