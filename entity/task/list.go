package task

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Listing limits.
const (
	// DefaultListLimit is List's page size when ListOptions.Limit is 0.
	DefaultListLimit = 100
	// MaxListScan bounds the task objects one List call reads, so that a
	// filter matching little cannot turn one call into a full scan; the
	// call then returns what it found with a next cursor.
	MaxListScan = 1000
)

// ListOptions select tasks for Client.List.
type ListOptions struct {
	// Shard limits the listing to one shard; nil lists every shard of
	// every group.
	Shard *storage.ShardID
	// Status and Type, when set, keep only matching tasks. Corrupt task
	// objects are listed only when neither is set.
	Status Status
	Type   string
	// Limit caps the tasks returned: 0 means DefaultListLimit, at most
	// storage.MaxListLimit.
	Limit int
	// After resumes a listing: pass the previous call's next.
	After string
}

// List walks the task objects (of one shard or all) in key order, reads
// each and returns those matching the filters, with next, the cursor of the
// following page ("" at the end). It reads at most MaxListScan objects per
// call, so a page can hold fewer than Limit tasks and still have a next.
// Task objects deleted meanwhile are skipped.
func (c *Client) List(ctx context.Context, o ListOptions) ([]*Task, string, error) {
	prefix := TasksPrefix
	if o.Shard != nil {
		if err := ValidateGroup(o.Shard.Group); err != nil {
			return nil, "", err
		}
		prefix = TaskPrefix(*o.Shard)
	}
	if o.Status != "" && !o.Status.Valid() {
		return nil, "", &ValidationError{Field: "ListOptions.Status", Value: strconv.Quote(string(o.Status)), Rule: "is not a task status"}
	}
	if o.Type != "" {
		if err := ValidateType(o.Type); err != nil {
			return nil, "", err
		}
	}
	limit := o.Limit
	switch {
	case limit < 0:
		return nil, "", &ValidationError{Field: "ListOptions.Limit", Value: strconv.Itoa(limit), Rule: "must not be negative"}
	case limit == 0:
		limit = DefaultListLimit
	case limit > storage.MaxListLimit:
		limit = storage.MaxListLimit
	}
	var out []*Task
	after, scanned := o.After, 0
	for {
		page, err := c.store.obj.List(ctx, prefix, storage.ListOptions{StartAfter: after, Limit: limit})
		if err != nil {
			return nil, "", fmt.Errorf("task: list %s: %w", prefix, err)
		}
		for i, obj := range page.Objects {
			after = obj.Key
			scanned++
			if t, err := c.listed(ctx, obj.Key, o); err != nil {
				return nil, "", err
			} else if t != nil {
				out = append(out, t)
			}
			if len(out) == limit || scanned >= MaxListScan {
				if i == len(page.Objects)-1 && !page.Truncated {
					return out, "", nil
				}
				return out, after, nil
			}
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return out, "", nil
		}
	}
}

// listed reads one listed key and returns its task if it matches o.
func (c *Client) listed(ctx context.Context, key string, o ListOptions) (*Task, error) {
	shard, id, err := ParseTaskKey(key)
	if err != nil {
		c.log.Warn("task: skipping a malformed task key", "key", key, "err", err)
		return nil, nil
	}
	t, _, err := c.store.Load(ctx, shard, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case errors.Is(err, ErrCorrupt) && t != nil:
		if o.Status == "" && o.Type == "" {
			return t, nil
		}
		return nil, nil
	case err != nil:
		return nil, err
	}
	if (o.Status != "" && t.Status != o.Status) || (o.Type != "" && t.Type != o.Type) {
		return nil, nil
	}
	return t, nil
}

// Wait polls the task ref until it is terminal and returns it. Polls start
// 20ms apart and back off to poll (≤ 0: DefaultWaitPoll). Transient storage
// errors (storage.ErrUnavailable) are retried; other errors, and the end of
// ctx, return the last task read with the error.
func (c *Client) Wait(ctx context.Context, ref string, poll time.Duration) (*Task, error) {
	if poll <= 0 {
		poll = DefaultWaitPoll
	}
	delay := min(20*time.Millisecond, poll)
	var last *Task
	for {
		t, err := c.Get(ctx, ref)
		switch {
		case err == nil:
			last = t
			if t.Status.IsTerminal() {
				return t, nil
			}
		case ctx.Err() != nil:
		case !storage.IsRetryable(err):
			return t, err
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return last, fmt.Errorf("task: wait %s: %w", ref, ctx.Err())
		case <-timer.C:
		}
		delay = min(2*delay, poll)
	}
}
