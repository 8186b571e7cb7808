package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// CASTries bounds the compare-and-swap loops of Pause and Resume.
const CASTries = 10

// Client creates, reads, lists, pauses, resumes and deletes the schedules
// of one shard group, and (through Register) drives them. It needs only
// the task client of that group: schedules are S3 objects and their ticks
// are tasks. It is safe for concurrent use.
type Client struct {
	tasks  *task.Client
	obj    storage.ObjectStore
	group  string
	shards int
	grace  time.Duration
	m      *metrics
	log    *slog.Logger

	history runCache // finished driver runs History has read
}

// NewClient returns a client of the schedules of tc's group, or a
// *ValidationError naming the option at fault. WithShards is required;
// WithGroup must name tc's group.
func NewClient(tc *task.Client, opts ...Option) (*Client, error) {
	o := options{group: storage.DefaultGroup, grace: DefaultGrace}
	for _, opt := range opts {
		opt(&o)
	}
	if tc == nil {
		return nil, &ValidationError{Field: "task client", Rule: "must not be nil"}
	}
	if err := task.ValidateGroup(o.group); err != nil {
		return nil, &ValidationError{Field: "WithGroup", Value: strconv.Quote(o.group), Rule: err.Error(), Err: err}
	}
	if o.shards < 1 {
		return nil, &ValidationError{Field: "WithShards", Value: strconv.Itoa(o.shards), Rule: "must be at least 1 (the cluster meta's shard count)"}
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	return &Client{tasks: tc, obj: tc.Store().Objects(), group: o.group, shards: o.shards, grace: o.grace,
		m: newMetrics(o.registry), log: o.logger}, nil
}

// Group returns the shard group of the client's schedules.
func (c *Client) Group() string { return c.group }

func (c *Client) shardOf(name string) storage.ShardID { return ShardOf(c.group, c.shards, name) }

// now is the authoritative time: the task store's (S3's) clock, the one
// delayed tasks become due by.
func (c *Client) now(ctx context.Context) (time.Time, error) {
	st, err := c.tasks.Store().Now(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("schedule: reading S3 time: %w", err)
	}
	return st.Now.UTC(), nil
}

// Create validates sp (a bad name, cron expression, zone, type, entity,
// input, catch-up policy or window gives a *ValidationError naming the
// field),
// writes the schedule if its name is free (ErrExists otherwise) and
// submits the driver task of its first tick. If that submit fails, the
// schedule exists without a pending tick: the error says so, and Resume
// submits it.
func (c *Client) Create(ctx context.Context, sp Spec) (*Schedule, error) {
	if err := sp.validate(c.tasks.Store().Options().MaxInputSize); err != nil {
		return nil, err
	}
	now, err := c.now(ctx)
	if err != nil {
		return nil, err
	}
	s := &Schedule{Name: sp.Name, Cron: sp.Cron, TZ: sp.TZ, Type: sp.Type, Entity: sp.Entity, Input: sp.Input,
		CatchUp: sp.CatchUp, CatchUpWindow: task.Duration(sp.CatchUpWindow), Generation: now.UnixNano(), CreatedAt: now, UpdatedAt: now, Rev: 1, Shard: c.shardOf(sp.Name)}
	first := s.Next(now)
	if first.IsZero() {
		return nil, &ValidationError{Field: "cron", Value: strconv.Quote(abbrev(sp.Cron, 60)), Rule: "never fires (no matching time in the next five years)"}
	}
	if err := c.create(ctx, s); err != nil {
		return nil, err
	}
	if err := c.submitDriver(ctx, s, first); err != nil {
		return s, fmt.Errorf("schedule %s created, but its first tick (%s) could not be scheduled; resume it to retry: %w",
			s.Name, first.Format(time.RFC3339), err)
	}
	return s, nil
}

// Get returns schedule name: ErrNotFound when there is none, a
// *CorruptError (ErrCorrupt) when its object does not decode.
func (c *Client) Get(ctx context.Context, name string) (*Schedule, error) {
	if err := task.ValidateID(name); err != nil {
		return nil, &ValidationError{Field: "name", Value: strconv.Quote(abbrev(name, 60)), Rule: "must be 1 to 256 bytes of [A-Za-z0-9_:-]", Err: err}
	}
	s, _, err := c.load(ctx, name)
	return s, err
}

// ListOptions select a page of List.
type ListOptions struct {
	// Limit caps the page: 0 means 100, at most storage.MaxListLimit.
	Limit int
	// After resumes a listing: the previous call's next.
	After string
}

// List returns a page of the group's schedules (every shard), in key
// order, and next, the cursor of the following page ("" at the end). A
// schedule deleted meanwhile is left out; a corrupt one fails the call
// with its *CorruptError (delete it to list the rest).
func (c *Client) List(ctx context.Context, o ListOptions) ([]*Schedule, string, error) {
	limit := o.Limit
	if limit <= 0 {
		limit = 100
	}
	prefix := GroupPrefix(c.group)
	page, err := c.obj.List(ctx, prefix, storage.ListOptions{StartAfter: o.After, Limit: limit})
	if err != nil {
		return nil, "", fmt.Errorf("schedule: list %s: %w", prefix, err)
	}
	var out []*Schedule
	for _, info := range page.Objects {
		name := nameOf(prefix, info.Key)
		if name == "" || task.ValidateID(name) != nil {
			continue
		}
		s, _, err := c.load(ctx, name)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return out, "", err
		}
		out = append(out, s)
	}
	next := ""
	if page.Truncated && len(page.Objects) > 0 {
		next = page.Objects[len(page.Objects)-1].Key
	}
	return out, next, nil
}

// Pause stops schedule name from firing: its chain of driver tasks ends at
// its next tick, which fires nothing. Pausing a paused schedule returns it
// unchanged.
func (c *Client) Pause(ctx context.Context, name string) (*Schedule, error) {
	return c.setPaused(ctx, name, true)
}

// Resume lets a paused schedule fire again from its first tick after now,
// submitting that tick's driver task. It is also the repair for a
// schedule whose chain was cut (a Create whose first submit failed, a
// driver that failed or was cancelled; see History): the driver id is
// derived from the tick, so resuming a running schedule, or twice,
// submits nothing new. A tick whose driver exists and was cancelled or
// failed is passed over (at most resumeTries of them): the chain goes on
// from the tick after it.
func (c *Client) Resume(ctx context.Context, name string) (*Schedule, error) {
	s, err := c.setPaused(ctx, name, false)
	if err != nil {
		return s, err
	}
	now, err := c.now(ctx)
	if err != nil {
		return s, err
	}
	n := s.Next(now)
	for range resumeTries {
		if n.IsZero() {
			return s, nil // never fires again: nothing to drive
		}
		d, err := c.submitDriverTask(ctx, s, n)
		if err != nil {
			return s, fmt.Errorf("schedule %s resumed, but its next tick (%s) could not be scheduled; resume it again: %w",
				name, n.Format(time.RFC3339), err)
		}
		if d.Status != task.Cancelled && d.Status != task.Failed {
			return s, nil
		}
		// The tick's driver exists and was cancelled (by an operator) or
		// failed: its id is the tick's, so the chain goes on from the
		// tick after it. Replaying it would run it now, before its tick.
		c.log.Info("schedule: resume passes over a tick whose driver ended", "schedule", name, "tick", n,
			"driver", d.Ref(), "status", d.Status)
		n = s.Next(n)
	}
	return s, fmt.Errorf("schedule %s resumed, but the drivers of its next %d ticks (to %s) were cancelled or failed: resume it after them",
		name, resumeTries, n.Format(time.RFC3339))
}

// resumeTries bounds the ticks Resume passes over whose drivers ended.
const resumeTries = 10

func (c *Client) setPaused(ctx context.Context, name string, paused bool) (*Schedule, error) {
	if err := task.ValidateID(name); err != nil {
		return nil, &ValidationError{Field: "name", Value: strconv.Quote(abbrev(name, 60)), Rule: "must be 1 to 256 bytes of [A-Za-z0-9_:-]", Err: err}
	}
	var last error
	for range CASTries {
		s, etag, err := c.load(ctx, name)
		if err != nil {
			return nil, err
		}
		if s.Paused == paused {
			return s, nil
		}
		now, err := c.now(ctx)
		if err != nil {
			return nil, err
		}
		s.Paused, s.UpdatedAt, s.Rev = paused, now, s.Rev+1
		err = c.replace(ctx, s, etag)
		if errors.Is(err, storage.ErrPrecondition) {
			last = err
			continue
		}
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("%w: %s: %d tries lost: %w", ErrContention, name, CASTries, last)
}

// Delete removes schedule name (ErrNotFound when there is none). Its chain
// ends at its next tick, which finds no schedule; Delete also cancels, best
// effort, the driver task of the next tick, so that no task waits for a
// distant tick. A schedule created again under the name is another
// generation: the old chain cannot drive it.
func (c *Client) Delete(ctx context.Context, name string) error {
	if err := task.ValidateID(name); err != nil {
		return &ValidationError{Field: "name", Value: strconv.Quote(abbrev(name, 60)), Rule: "must be 1 to 256 bytes of [A-Za-z0-9_:-]", Err: err}
	}
	s, _, err := c.load(ctx, name)
	var ce *CorruptError
	if errors.As(err, &ce) {
		// The repair path: a corrupt object has no chain worth cancelling.
		if err := c.obj.Delete(ctx, ce.Key); err != nil {
			return fmt.Errorf("schedule: delete %s: %w", ce.Key, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	key := Key(s.Shard, name)
	if err := c.obj.Delete(ctx, key); err != nil {
		return fmt.Errorf("schedule: delete %s: %w", key, err)
	}
	if now, err := c.now(ctx); err == nil && !s.Paused {
		if n := s.Next(now); !n.IsZero() {
			ref := task.Ref(s.Shard, DriverID(name, s.Generation, n))
			if _, err := c.tasks.Cancel(ctx, ref); err != nil && !errors.Is(err, task.ErrNotFound) && !errors.Is(err, task.ErrTerminal) {
				c.log.Debug("schedule: could not cancel the next driver task; it ends when it runs", "schedule", name, "task", ref, "err", err)
			}
		}
	}
	return nil
}

// driverInput is a driver task's input: the generation and tick it
// drives. Derived from (generation, tick) alone, so that a resubmit of
// the same tick is the same task.
type driverInput struct {
	Generation int64     `json:"generation"`
	Tick       time.Time `json:"tick"`
}

// submitDriver submits the driver task of schedule s for tick, due then.
func (c *Client) submitDriver(ctx context.Context, s *Schedule, tick time.Time) error {
	_, err := c.submitDriverTask(ctx, s, tick)
	return err
}

// submitDriverTask is submitDriver, returning the driver task: the one
// created, or the one that was there.
func (c *Client) submitDriverTask(ctx context.Context, s *Schedule, tick time.Time) (*task.Task, error) {
	in, err := json.Marshal(driverInput{Generation: s.Generation, Tick: tick.UTC()})
	if err != nil {
		return nil, err
	}
	t, _, err := c.tasks.Submit(ctx, task.SubmitRequest{
		ID: DriverID(s.Name, s.Generation, tick), Type: DriverType, Entity: s.Name, Input: in, AvailableAt: tick,
	})
	if err != nil {
		return nil, err
	}
	if t.Shard != s.Shard {
		// The task client places by its own group and shard count.
		return nil, fmt.Errorf("%w: schedule %s lives in shard %s but its driver task went to %s: WithGroup and WithShards must be the task client's",
			ErrInvalid, s.Name, s.Shard, t.Shard)
	}
	return t, nil
}
