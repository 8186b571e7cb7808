package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Store reads and writes state objects with conditional writes. It is safe
// for concurrent use.
type Store struct {
	obj  storage.ObjectStore
	opts options
}

// NewStore returns a store on obj.
func NewStore(obj storage.ObjectStore, opts ...Option) *Store {
	o := options{timeout: DefaultTimeout, maxSize: DefaultMaxSize}
	for _, opt := range opts {
		opt(&o)
	}
	if o.timeout <= 0 {
		o.timeout = DefaultTimeout
	}
	if o.maxSize <= 0 {
		o.maxSize = DefaultMaxSize
	}
	return &Store{obj: obj, opts: o}
}

// MaxSize is the largest encoded state Save writes.
func (s *Store) MaxSize() int { return s.opts.maxSize }

// Get returns the entity's envelope and its ETag: ErrNotFound when it has
// no state object, a *CorruptError naming the key when the object does not
// decode or names another entity.
func (s *Store) Get(ctx context.Context, shard storage.ShardID, typ, id string) (*Envelope, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.timeout)
	defer cancel()
	return s.get(ctx, Key(shard, typ, id), typ, id)
}

func (s *Store) get(ctx context.Context, key, typ, id string) (*Envelope, string, error) {
	obj, err := s.obj.Get(ctx, key)
	if err != nil {
		return nil, "", err
	}
	env, err := decode(key, typ, id, obj.Body)
	if err != nil {
		return nil, "", err
	}
	return env, obj.ETag, nil
}

// Delete removes the entity's state object, whatever it holds: the
// operator's repair of a corrupt object. The owner's next save is refused
// (its ETag is gone) and its next activation starts from no state.
func (s *Store) Delete(ctx context.Context, shard storage.ShardID, typ, id string) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.timeout)
	defer cancel()
	return s.obj.Delete(ctx, Key(shard, typ, id))
}

// fenceTries bounds Fence's rounds: each lost race is to a newer writer,
// and a second round sees it.
const fenceTries = 3

// Fence loads the entity's state for the ownership epoch of runnerID and
// makes the object record that epoch, so that no older ownership can write
// it again. A stored epoch equal to epoch costs one GET; an older one a GET
// and a Replace; an absent object a GET and a Create (of an envelope with
// null state). A newer stored epoch is a *FencedError: the shard has
// moved on. It returns the envelope as stored and its ETag.
func (s *Store) Fence(ctx context.Context, shard storage.ShardID, typ, id string, epoch int64, runnerID string) (*Envelope, string, error) {
	return s.fence(ctx, shard, typ, id, epoch, runnerID, false)
}

// Refence is Fence for an ownership that may have a write of the object
// still in flight (one whose outcome was unknown: a timeout, a lost
// answer, a cancelled request that the server may yet apply): it writes
// the object back even when the stored epoch is already epoch, a
// conditional Replace that gives it a new ETag. A write still in flight
// then either landed before the GET (and its effect is in what Refence
// returns), or lands between the GET and the Replace (which is refused
// and read again), or comes later and is refused, its If-Match gone. A
// GET alone would leave the caller's memory without a write that lands
// after it. It costs a GET and a PUT.
func (s *Store) Refence(ctx context.Context, shard storage.ShardID, typ, id string, epoch int64, runnerID string) (*Envelope, string, error) {
	return s.fence(ctx, shard, typ, id, epoch, runnerID, true)
}

func (s *Store) fence(ctx context.Context, shard storage.ShardID, typ, id string, epoch int64, runnerID string, rewrite bool) (*Envelope, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.timeout)
	defer cancel()
	key := Key(shard, typ, id)
	for range fenceTries {
		env, etag, err := s.get(ctx, key, typ, id)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			env = &Envelope{Type: typ, ID: id, Shard: shard.String(), Epoch: epoch, Rev: 1,
				RunnerID: runnerID, SavedAt: s.now(), State: json.RawMessage("null")}
			body, err := json.Marshal(env)
			if err != nil {
				return nil, "", fmt.Errorf("state: %s: encode: %w", key, err)
			}
			etag, err = s.obj.Create(ctx, key, body)
			if errors.Is(err, storage.ErrPrecondition) {
				continue // created meanwhile: read it
			}
			if err != nil {
				return nil, "", err
			}
			return env, etag, nil
		case err != nil:
			return nil, "", err
		case env.Epoch == epoch && !rewrite:
			return env, etag, nil
		case env.Epoch > epoch:
			return nil, "", &FencedError{Key: key, Epoch: epoch, Stored: env.Epoch}
		}
		fenced := env.Clone()
		fenced.Epoch, fenced.RunnerID = epoch, runnerID
		etag, err = s.write(ctx, key, fenced, etag)
		if errors.Is(err, storage.ErrPrecondition) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return fenced, etag, nil
	}
	return nil, "", fmt.Errorf("state: %s: fence for epoch %d: lost %d races in a row: %w", key, epoch, fenceTries, storage.ErrPrecondition)
}

// Save writes env (its Epoch the caller's fence) over the version whose
// ETag is ifMatch, and returns the new ETag. It sets env.Rev to the next
// revision and env.SavedAt, also when it fails. A state over the size
// limit is a *TooLargeError before any request. A lost If-Match is a
// *FencedError, after one GET that tells a newer owner from a deleted
// object; if that GET finds this very write (its answer was lost), Save
// succeeds.
func (s *Store) Save(ctx context.Context, shard storage.ShardID, env *Envelope, ifMatch string) (string, error) {
	key := Key(shard, env.Type, env.ID)
	if n := len(env.State); n > s.opts.maxSize {
		return "", &TooLargeError{Key: key, Size: n, Limit: s.opts.maxSize}
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.timeout)
	defer cancel()
	etag, err := s.write(ctx, key, env, ifMatch)
	if !errors.Is(err, storage.ErrPrecondition) {
		return etag, err
	}
	stored, setag, gerr := s.get(ctx, key, env.Type, env.ID)
	switch {
	case errors.Is(gerr, storage.ErrNotFound):
		return "", &FencedError{Key: key, Epoch: env.Epoch, Deleted: true}
	case gerr != nil:
		return "", fmt.Errorf("state: %s: save refused (%w), and re-reading failed: %w", key, err, gerr)
	case stored.Epoch == env.Epoch && stored.Rev == env.Rev && stored.RunnerID == env.RunnerID && stored.SavedAt.Equal(env.SavedAt):
		return setag, nil // our own write, its answer lost
	}
	return "", &FencedError{Key: key, Epoch: env.Epoch, Stored: stored.Epoch}
}

// write bumps env's revision and replaces the object if it still has
// ifMatch.
func (s *Store) write(ctx context.Context, key string, env *Envelope, ifMatch string) (string, error) {
	env.Rev++
	env.SavedAt = s.now()
	if len(env.State) == 0 {
		env.State = json.RawMessage("null")
	}
	body, err := json.Marshal(env)
	if err != nil {
		return "", fmt.Errorf("state: %s: encode: %w", key, err)
	}
	return s.obj.Replace(ctx, key, body, ifMatch)
}

func (s *Store) now() time.Time {
	if s.opts.now != nil {
		return s.opts.now().UTC()
	}
	return time.Now().UTC()
}
