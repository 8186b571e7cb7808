package memstore

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tenurehq/tenure/storage"
)

// MaxKeyLength is the longest key accepted, in bytes: S3's limit.
const MaxKeyLength = 1024

// Store is an in-memory storage.ObjectStore. It is safe for concurrent use.
type Store struct {
	opts options

	mu      sync.Mutex
	objects map[string]object
	keys    []string // sorted keys of objects
	faults  []*Injection
	hook    Hook
	calls   map[string]int
}

type object struct {
	body     []byte
	etag     string
	modified time.Time
}

var _ storage.ObjectStore = (*Store)(nil)

// New returns an empty Store.
func New(opts ...Option) *Store {
	o := options{clock: time.Now, requestTimeout: DefaultRequestTimeout, maxObjectSize: DefaultMaxObjectSize}
	for _, opt := range opts {
		opt(&o)
	}
	return &Store{opts: o, objects: map[string]object{}, hook: o.hook, calls: map[string]int{}}
}

// Create implements storage.ObjectStore.
func (s *Store) Create(ctx context.Context, key string, body []byte) (etag string, err error) {
	err = s.call(ctx, OpCreate, key, true, func() error {
		if _, ok := s.objects[key]; ok {
			return fmt.Errorf("%w: key exists", storage.ErrPrecondition)
		}
		etag = s.store(key, body)
		return nil
	})
	return etag, err
}

// Replace implements storage.ObjectStore. ETags compare without their
// quotes, as S3 servers do. An empty ifMatch, or "*", is refused with
// storage.ErrInvalid, as by storage/s3.
func (s *Store) Replace(ctx context.Context, key string, body []byte, ifMatch string) (etag string, err error) {
	if ifMatch == "" || ifMatch == "*" {
		return "", s.opErr(OpReplace, key, fmt.Errorf("%w: If-Match ETag %q", storage.ErrInvalid, ifMatch))
	}
	err = s.call(ctx, OpReplace, key, true, func() error {
		cur, ok := s.objects[key]
		if !ok {
			return fmt.Errorf("%w: key does not exist", storage.ErrPrecondition)
		}
		if strings.Trim(cur.etag, `"`) != strings.Trim(ifMatch, `"`) {
			return fmt.Errorf("%w: ETag is %s, not %s", storage.ErrPrecondition, cur.etag, ifMatch)
		}
		etag = s.store(key, body)
		return nil
	})
	return etag, err
}

// Put implements storage.ObjectStore.
func (s *Store) Put(ctx context.Context, key string, body []byte) (etag string, err error) {
	err = s.call(ctx, OpPut, key, true, func() error {
		etag = s.store(key, body)
		return nil
	})
	return etag, err
}

// Get implements storage.ObjectStore.
func (s *Store) Get(ctx context.Context, key string) (obj storage.Object, err error) {
	err = s.call(ctx, OpGet, key, true, func() error {
		o, ok := s.objects[key]
		if !ok {
			return storage.ErrNotFound
		}
		if n := int64(len(o.body)); n > s.opts.maxObjectSize {
			return fmt.Errorf("%w: %d bytes, the limit is %d", storage.ErrTooLarge, n, s.opts.maxObjectSize)
		}
		obj = storage.Object{ObjectInfo: o.info(key), Body: slices.Clone(o.body)}
		if obj.Body == nil {
			obj.Body = []byte{}
		}
		return nil
	})
	return obj, err
}

// Head implements storage.ObjectStore.
func (s *Store) Head(ctx context.Context, key string) (info storage.ObjectInfo, err error) {
	err = s.call(ctx, OpHead, key, true, func() error {
		o, ok := s.objects[key]
		if !ok {
			return storage.ErrNotFound
		}
		info = o.info(key)
		return nil
	})
	return info, err
}

// Delete implements storage.ObjectStore.
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.call(ctx, OpDelete, key, true, func() error {
		if _, ok := s.objects[key]; ok {
			s.remove(key)
		}
		return nil
	})
}

// remove deletes an existing key; s.mu is held.
func (s *Store) remove(key string) {
	delete(s.objects, key)
	i := sort.SearchStrings(s.keys, key)
	s.keys = slices.Delete(s.keys, i, i+1)
}

// DeleteIfMatch implements storage.ObjectStore: atomically, as S3 does.
// ETags compare without their quotes; an empty ifMatch, or "*", is refused
// with storage.ErrInvalid.
func (s *Store) DeleteIfMatch(ctx context.Context, key, ifMatch string) error {
	if ifMatch == "" || ifMatch == "*" {
		return s.opErr(OpDelete, key, fmt.Errorf("%w: If-Match ETag %q", storage.ErrInvalid, ifMatch))
	}
	return s.call(ctx, OpDelete, key, true, func() error {
		cur, ok := s.objects[key]
		if !ok {
			return nil
		}
		if strings.Trim(cur.etag, `"`) != strings.Trim(ifMatch, `"`) {
			return fmt.Errorf("%w: ETag is %s, not %s", storage.ErrPrecondition, cur.etag, ifMatch)
		}
		s.remove(key)
		return nil
	})
}

// List implements storage.ObjectStore.
func (s *Store) List(ctx context.Context, prefix string, opts storage.ListOptions) (page storage.ListPage, err error) {
	if err := checkKey(prefix, true); err != nil {
		return page, s.opErr(OpList, prefix, fmt.Errorf("prefix: %w", err))
	}
	if err := checkKey(opts.StartAfter, true); err != nil {
		return page, s.opErr(OpList, prefix, fmt.Errorf("StartAfter: %w", err))
	}
	if opts.Limit < 0 {
		return page, s.opErr(OpList, prefix, fmt.Errorf("%w: negative Limit %d", storage.ErrInvalid, opts.Limit))
	}
	limit := opts.Limit
	if limit == 0 || limit > storage.MaxListLimit {
		limit = storage.MaxListLimit
	}
	err = s.call(ctx, OpList, prefix, false, func() error {
		i := sort.SearchStrings(s.keys, prefix)
		if opts.StartAfter >= prefix {
			// First key strictly after StartAfter.
			i = sort.Search(len(s.keys), func(j int) bool { return s.keys[j] > opts.StartAfter })
		}
		page.Objects = []storage.ObjectInfo{}
		for ; i < len(s.keys) && strings.HasPrefix(s.keys[i], prefix); i++ {
			if len(page.Objects) == limit {
				page.Truncated = true
				break
			}
			page.Objects = append(page.Objects, s.objects[s.keys[i]].info(s.keys[i]))
		}
		return nil
	})
	return page, err
}

// ServerTime implements storage.ObjectStore: the injected clock, exactly.
func (s *Store) ServerTime(ctx context.Context) (st storage.ServerTime, err error) {
	err = s.call(ctx, OpServerTime, "", false, func() error {
		st = storage.ServerTime{Now: s.opts.clock().UTC()}
		return nil
	})
	return st, err
}

// Calls returns how many times op was called, faulted calls included and
// calls refused for invalid arguments excluded: the requests an S3 adapter
// would have made. OpServerTime counts calls, though an S3 adapter answers
// most of them without a request.
func (s *Store) Calls(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// CallCounts returns Calls for every operation called at least once.
func (s *Store) CallCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.calls)
}

// ResetCalls zeroes the call counts.
func (s *Store) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.calls)
}

// Len returns the number of stored objects.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

// call runs apply under the store's lock, between the BeforeApply and
// AfterApply faults and hook, within the request timeout.
func (s *Store) call(ctx context.Context, op, key string, isKey bool, apply func() error) error {
	if isKey {
		if err := checkKey(key, false); err != nil {
			return s.opErr(op, key, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return s.opErr(op, key, ctxErr(err))
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.requestTimeout)
	defer cancel()
	s.mu.Lock()
	s.calls[op]++
	s.mu.Unlock()

	if err := s.intercept(ctx, op, key, BeforeApply); err != nil {
		return s.opErr(op, key, err)
	}
	if err := ctx.Err(); err != nil {
		// The hook held the call past its deadline: it never reached the
		// store.
		return s.opErr(op, key, ctxErr(err))
	}
	s.mu.Lock()
	err := apply()
	s.mu.Unlock()
	if ferr := s.intercept(ctx, op, key, AfterApply); ferr != nil {
		return s.opErr(op, key, ferr)
	}
	if err != nil {
		return s.opErr(op, key, err)
	}
	return nil
}

// store writes key; s.mu is held.
func (s *Store) store(key string, body []byte) string {
	sum := md5.Sum(body)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	if _, ok := s.objects[key]; !ok {
		i := sort.SearchStrings(s.keys, key)
		s.keys = slices.Insert(s.keys, i, key)
	}
	s.objects[key] = object{
		body:     slices.Clone(body),
		etag:     etag,
		modified: s.opts.clock().UTC().Truncate(time.Second),
	}
	return etag
}

func (o object) info(key string) storage.ObjectInfo {
	return storage.ObjectInfo{Key: key, ETag: o.etag, Size: int64(len(o.body)), LastModified: o.modified}
}

func (s *Store) opErr(op, key string, err error) error {
	var oe *storage.OpError
	if errors.As(err, &oe) {
		return err
	}
	return &storage.OpError{Backend: "mem", Op: op, Key: key, Endpoint: "memory", Err: err}
}

// ctxErr maps a context error: a deadline means the backend did not answer
// in time; a cancellation is the caller's.
func ctxErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return storage.Wrap(storage.ErrUnavailable, err)
	}
	return err
}

// checkKey applies storage/s3's key rules, so that tests on this store catch
// keys S3 would refuse. Prefixes (empty allowed) follow the same character
// rules.
func checkKey(key string, prefix bool) error {
	if key == "" && !prefix {
		return fmt.Errorf("%w: empty key", storage.ErrInvalid)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: key %q is not valid UTF-8", storage.ErrInvalid, key)
	}
	for i, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: key %q has control character %U at byte %d", storage.ErrInvalid, key, r, i)
		}
	}
	if len(key) > MaxKeyLength {
		return fmt.Errorf("%w: key is %d bytes, S3 allows %d", storage.ErrInvalid, len(key), MaxKeyLength)
	}
	return nil
}
