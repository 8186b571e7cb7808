package task

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/tenurehq/tenure/storage"
)

// Store reads and writes task objects and ready pointers on an object store.
// Every write of a task object is conditional: Create with If-None-Match,
// Write with If-Match on the ETag the caller read. It is safe for concurrent
// use.
type Store struct {
	obj  storage.ObjectStore
	opts storeOptions
}

// NewStore returns a Store on obj. Options with out-of-range values are
// ignored (see each Option), so the Store always runs with valid limits.
func NewStore(obj storage.ObjectStore, opts ...Option) *Store {
	o := storeOptions{Options: DefaultOptions(), clock: obj.ServerTime, logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	return &Store{obj: obj, opts: o}
}

// Objects returns the underlying object store.
func (s *Store) Objects() storage.ObjectStore { return s.obj }

// Options returns the Store's limits.
func (s *Store) Options() Options { return s.opts.Options }

// Now returns the authoritative time (the object store's ServerTime unless
// WithClock replaced it).
func (s *Store) Now(ctx context.Context) (storage.ServerTime, error) {
	st, err := s.opts.clock(ctx)
	if err != nil {
		return storage.ServerTime{}, fmt.Errorf("task: server time: %w", err)
	}
	return st, nil
}

// Configure sets the Store's history limit and jitter source on t, as Load
// and Create do. Call it on tasks built or decoded elsewhere.
func (s *Store) Configure(t *Task) {
	t.histLimit = s.opts.HistoryLimit
	t.rnd = s.opts.rnd
}

// Load reads the task shard/id and returns it with its ETag, the token for
// Write.
//
// A missing task gives an error matching ErrNotFound (and
// storage.ErrNotFound). A body that does not decode, or decodes to an
// invalid task or to another task's id or shard, gives a *CorruptError
// (matching ErrCorrupt and storage.ErrCorrupt) together with a non-nil Task
// holding just ID, Shard and the raw body in Corrupt (at most
// MaxCorruptKeep bytes), and the ETag: the caller can MarkCorrupt it and
// Write it back as failed without losing the bytes. A body too large to
// read is reported the same way, with no bytes kept.
func (s *Store) Load(ctx context.Context, shard storage.ShardID, id string) (*Task, string, error) {
	if err := checkShardID(shard, id); err != nil {
		return nil, "", err
	}
	key := TaskKey(shard, id)
	obj, err := s.obj.Get(ctx, key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil, "", fmt.Errorf("%w: %s: %w", ErrNotFound, Ref(shard, id), err)
	case errors.Is(err, storage.ErrTooLarge):
		info, herr := s.obj.Head(ctx, key)
		if herr != nil {
			return nil, "", fmt.Errorf("task: load %s: %w", key, err)
		}
		t := &Task{ID: id, Shard: shard, CorruptEncoding: CorruptNone, CorruptSize: info.Size,
			Corrupt: fmt.Sprintf("(body of %d bytes not read: over the object store's read limit)", info.Size)}
		s.Configure(t)
		return t, info.ETag, &CorruptError{Key: key, Reason: "too large to read", Err: err}
	case err != nil:
		return nil, "", fmt.Errorf("task: load %s: %w", key, err)
	}
	t, cerr := decode(key, shard, id, obj.Body)
	if cerr != nil {
		t = &Task{ID: id, Shard: shard}
		keepCorrupt(t, obj.Body)
	}
	s.Configure(t)
	if cerr != nil {
		return t, obj.ETag, cerr
	}
	return t, obj.ETag, nil
}

func decode(key string, shard storage.ShardID, id string, body []byte) (*Task, error) {
	t := new(Task)
	if err := json.Unmarshal(body, t); err != nil {
		return nil, &CorruptError{Key: key, Reason: "does not decode", Err: err}
	}
	if err := t.Validate(); err != nil {
		return nil, &CorruptError{Key: key, Reason: "decodes to an invalid task", Err: err}
	}
	if t.ID != id || t.Shard != shard {
		return nil, &CorruptError{Key: key, Reason: fmt.Sprintf("holds task %s", t.Ref())}
	}
	return t, nil
}

// keepCorrupt stores raw in t.Corrupt, as text if it is valid UTF-8 (a JSON
// string cannot carry anything else faithfully), else as base64.
func keepCorrupt(t *Task, raw []byte) {
	t.CorruptSize = int64(len(raw))
	if len(raw) == 0 {
		t.Corrupt, t.CorruptEncoding = "(empty body)", CorruptNone
		return
	}
	if len(raw) > MaxCorruptKeep {
		raw = raw[:MaxCorruptKeep]
	}
	if utf8.Valid(raw) {
		t.Corrupt, t.CorruptEncoding = string(raw), CorruptText
		return
	}
	t.Corrupt, t.CorruptEncoding = base64.StdEncoding.EncodeToString(raw), CorruptBase64
}

// CorruptBytes returns the raw body kept in Corrupt, decoded; nil when no
// bytes were kept.
func (t *Task) CorruptBytes() []byte {
	switch t.CorruptEncoding {
	case CorruptText:
		if t.Corrupt == "" {
			return nil
		}
		return []byte(t.Corrupt)
	case CorruptBase64:
		b, err := base64.StdEncoding.DecodeString(t.Corrupt)
		if err != nil {
			return nil
		}
		return b
	}
	return nil
}

// Write replaces the task object if its ETag is still etag, with Rev+1 and
// UpdatedAt = now, and returns the new ETag; t is updated only on success.
// A lost race (the object changed, or vanished) gives an error matching
// storage.ErrPrecondition: re-read, never overwrite. A context already done
// is refused before any request, so a detached runner cannot commit.
func (s *Store) Write(ctx context.Context, t *Task, etag string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("task: write %s refused: %w", t.Ref(), err)
	}
	if etag == "" {
		return "", &ValidationError{Field: "etag", Rule: "must not be empty: Write replaces the version the caller read"}
	}
	return s.put(ctx, t, func(key string, body []byte) (string, error) {
		return s.obj.Replace(ctx, key, body, etag)
	})
}

// Create writes a new task object only if none exists (If-None-Match), with
// Rev+1 and UpdatedAt = now (and CreatedAt = now when zero), and returns its
// ETag. An existing object gives an error matching ErrExists and
// storage.ErrPrecondition.
func (s *Store) Create(ctx context.Context, t *Task) (string, error) {
	h, err := s.create(ctx, t)
	return h.ETag, err
}

// create is Create, returning the body written with its ETag: what a
// wake-up hint carries.
func (s *Store) create(ctx context.Context, t *Task) (WakeHint, error) {
	if err := ctx.Err(); err != nil {
		return WakeHint{}, fmt.Errorf("task: create %s refused: %w", t.Ref(), err)
	}
	var written []byte
	etag, err := s.put(ctx, t, func(key string, body []byte) (string, error) {
		written = body
		return s.obj.Create(ctx, key, body)
	})
	if errors.Is(err, storage.ErrPrecondition) {
		return WakeHint{}, fmt.Errorf("%w: %s: %w", ErrExists, t.Ref(), err)
	}
	if err != nil {
		return WakeHint{}, err
	}
	return WakeHint{ETag: etag, Body: written}, nil
}

func (s *Store) put(ctx context.Context, t *Task, write func(key string, body []byte) (string, error)) (string, error) {
	if err := t.Validate(); err != nil {
		return "", fmt.Errorf("task: write %s: %w", t.Ref(), err)
	}
	now, err := s.Now(ctx)
	if err != nil {
		return "", err
	}
	w := *t
	w.Rev++
	w.UpdatedAt = now.Now.UTC()
	if w.CreatedAt.IsZero() {
		w.CreatedAt = w.UpdatedAt
	}
	w.trimHistory(s.opts.HistoryLimit)
	if w.History == nil {
		w.History = []Transition{}
	}
	body, err := json.Marshal(w)
	if err != nil {
		return "", fmt.Errorf("task: encode %s: %w", t.Ref(), err)
	}
	etag, err := write(w.Key(), body)
	if err != nil {
		return "", fmt.Errorf("task: write %s (rev %d): %w", t.Ref(), w.Rev, err)
	}
	t.Rev, t.UpdatedAt, t.CreatedAt = w.Rev, w.UpdatedAt, w.CreatedAt
	t.History, t.HistoryDropped = w.History, w.HistoryDropped
	return etag, nil
}

// PutPointer writes the task's ready pointer (an empty object at
// t.PointerKey()). Writing it again is harmless.
func (s *Store) PutPointer(ctx context.Context, t *Task) error {
	if err := checkShardID(t.Shard, t.ID); err != nil {
		return err
	}
	key := t.PointerKey()
	if _, err := s.obj.Put(ctx, key, nil); err != nil {
		return fmt.Errorf("task: put pointer %s: %w", key, err)
	}
	return nil
}

// DeletePointer deletes a ready pointer; a missing one is not an error.
func (s *Store) DeletePointer(ctx context.Context, key string) error {
	if err := s.obj.Delete(ctx, key); err != nil {
		return fmt.Errorf("task: delete pointer %s: %w", key, err)
	}
	return nil
}

// PointerPage is one page of a shard's ready pointers.
type PointerPage struct {
	Pointers []Pointer // in due order
	// Malformed are the keys under the shard's pointer prefix that do not
	// parse; they were skipped.
	Malformed []string
	// Last is the last key listed, parsed or not: the startAfter of the
	// next page. Empty when the page is empty.
	Last string
	More bool // more keys follow Last
}

// ListPointersPage lists one page of up to limit keys (0 or more than
// storage.MaxListLimit: storage.MaxListLimit) under the shard's pointer
// prefix, after startAfter.
func (s *Store) ListPointersPage(ctx context.Context, shard storage.ShardID, startAfter string, limit int) (PointerPage, error) {
	prefix := PointerPrefix(shard)
	page, err := s.obj.List(ctx, prefix, storage.ListOptions{StartAfter: startAfter, Limit: limit})
	if err != nil {
		return PointerPage{}, fmt.Errorf("task: list pointers %s: %w", prefix, err)
	}
	out := PointerPage{More: page.Truncated && len(page.Objects) > 0}
	for _, o := range page.Objects {
		out.Last = o.Key
		p, err := ParsePointer(o.Key)
		if err != nil || p.Shard != shard {
			out.Malformed = append(out.Malformed, o.Key)
			continue
		}
		p.Written = o.LastModified
		out.Pointers = append(out.Pointers, p)
	}
	return out, nil
}

// ListPointers returns up to limit of the shard's ready pointers after
// startAfter, in due order, and whether more follow. Keys that do not parse
// are skipped and logged at warn level; pages made only of them are passed
// over, so a non-empty result's last Key is always the next startAfter.
// ListPointersPage reports them instead.
func (s *Store) ListPointers(ctx context.Context, shard storage.ShardID, startAfter string, limit int) ([]Pointer, bool, error) {
	for {
		page, err := s.ListPointersPage(ctx, shard, startAfter, limit)
		if err != nil {
			return nil, false, err
		}
		for _, k := range page.Malformed {
			s.opts.logger.Warn("task: skipping malformed ready pointer", "key", k, "shard", shard.String())
		}
		if len(page.Pointers) > 0 || !page.More {
			return page.Pointers, page.More, nil
		}
		startAfter = page.Last
	}
}

func checkShardID(shard storage.ShardID, id string) error {
	if err := ValidateGroup(shard.Group); err != nil {
		return err
	}
	if shard.Index < 0 {
		return &ValidationError{Field: "shard index", Value: fmt.Sprint(shard.Index), Rule: "must not be negative"}
	}
	return ValidateID(id)
}
