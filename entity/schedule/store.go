package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tenurehq/tenure/storage"
)

// load reads schedule name: the schedule and its ETag, an error matching
// ErrNotFound when there is none, or a *CorruptError.
func (c *Client) load(ctx context.Context, name string) (*Schedule, string, error) {
	shard := c.shardOf(name)
	key := Key(shard, name)
	obj, err := c.obj.Get(ctx, key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil, "", fmt.Errorf("%w: %s (key %s)", ErrNotFound, name, key)
	case err != nil:
		return nil, "", fmt.Errorf("schedule: read %s: %w", key, err)
	}
	s, err := decode(key, obj.Body)
	if err != nil {
		return nil, "", err
	}
	if s.Name != name {
		return nil, "", &CorruptError{Key: key, Err: fmt.Errorf("holds schedule %q", s.Name)}
	}
	s.Shard = shard
	return s, obj.ETag, nil
}

func decode(key string, body []byte) (*Schedule, error) {
	s := new(Schedule)
	if err := json.Unmarshal(body, s); err != nil {
		return nil, &CorruptError{Key: key, Err: err}
	}
	if err := s.check(); err != nil {
		return nil, &CorruptError{Key: key, Err: err}
	}
	return s, nil
}

// create writes s if its key is free: ErrExists otherwise.
func (c *Client) create(ctx context.Context, s *Schedule) error {
	key := Key(s.Shard, s.Name)
	body, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("schedule: encode %s: %w", key, err)
	}
	_, err = c.obj.Create(ctx, key, body)
	if errors.Is(err, storage.ErrPrecondition) {
		return fmt.Errorf("%w: %s (key %s): delete it first", ErrExists, s.Name, key)
	}
	if err != nil {
		return fmt.Errorf("schedule: create %s: %w", key, err)
	}
	return nil
}

// replace writes s over the version etag names; storage.ErrPrecondition
// (wrapped) when it changed.
func (c *Client) replace(ctx context.Context, s *Schedule, etag string) error {
	key := Key(s.Shard, s.Name)
	body, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("schedule: encode %s: %w", key, err)
	}
	if _, err := c.obj.Replace(ctx, key, body, etag); err != nil {
		return fmt.Errorf("schedule: write %s: %w", key, err)
	}
	return nil
}

// nameOf returns the schedule name of a key under GroupPrefix, or "" when
// the key is no schedule's.
func nameOf(prefix, key string) string {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return ""
	}
	_, file, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	name, ok := strings.CutSuffix(file, ".json")
	if !ok || strings.Contains(name, "/") {
		return ""
	}
	return name
}
