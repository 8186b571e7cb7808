package s3coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tenurehq/tenure/storage"
)

// readConcurrency bounds the GETs one listing read (or a verify, or an
// acquire) runs at once: enough to hide a round trip's latency, few enough
// not to flood a gateway.
const readConcurrency = 16

// Store is a storage.RunnerStore on a storage.ObjectStore, coordinating
// through conditional writes alone (see doc.go).
type Store struct {
	objects storage.ObjectStore
	opts    options

	closeOnce sync.Once
	ctx       context.Context // cancelled by Close; parent of background work
	cancel    context.CancelFunc
	wg        sync.WaitGroup // background goroutines (pollers, watches)

	revMu   sync.Mutex
	lastRev int64 // the largest revision this store has written or reported

	cacheMu sync.Mutex
	cache   map[string]cachedObject // key → the body last read, by ETag

	// registering holds a token per runner id while a Register of it runs
	// through this store (session.go).
	regMu       sync.Mutex
	registering map[string]chan struct{}

	members *poller[*memberState]
	config  *poller[configState]
	wakes   *wakePoller
}

// cachedObject is a body read earlier, valid while the key's ETag is etag.
type cachedObject struct {
	etag string
	body []byte
}

var _ storage.RunnerStore = (*Store)(nil)

// New returns a runner store on objects (keys relative to objects' own
// prefix); it makes no request.
func New(objects storage.ObjectStore, opts ...Option) (*Store, error) {
	if objects == nil {
		return nil, fmt.Errorf("s3coord: new store: %w: nil object store", storage.ErrInvalid)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{objects: objects, opts: o, ctx: ctx, cancel: cancel, cache: map[string]cachedObject{}, registering: map[string]chan struct{}{}}
	s.members = newPoller(s, "membership", s.readMembers, (*memberState).sameAs, (*memberState).due)
	s.config = newPoller(s, "config", s.readConfigState, configState.sameAs, nil)
	s.wakes = newWakePoller(s)
	return s, nil
}

func (o options) validate() error {
	bad := func(field, why string) error {
		return fmt.Errorf("s3coord: option %s: %w: %s", field, storage.ErrInvalid, why)
	}
	switch {
	case o.requestTimeout <= 0:
		return bad("request timeout", "must be positive")
	case o.minPoll <= 0 || o.maxPoll < o.minPoll:
		return bad("poll interval", fmt.Sprintf("min %s and max %s must be positive, min ≤ max", o.minPoll, o.maxPoll))
	case o.logger == nil:
		return bad("logger", "must not be nil")
	case o.now == nil:
		return bad("clock", "must not be nil")
	}
	return nil
}

// Close stops background work: watches end, and sessions end without
// revoking their leases (as with Session.Orphan). It does not close the
// object store.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

// withTimeout derives a call context bounded by the request timeout.
func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.requestTimeout)
}

// opError wraps err for operation op on key (relative to the object
// store's prefix, which the object store's own error inside names in full).
func (s *Store) opError(op, key string, err error) error {
	var oe *storage.OpError
	if errors.As(err, &oe) && oe.Backend == "s3coord" {
		return err
	}
	return &storage.OpError{Backend: "s3coord", Op: op, Key: key, Endpoint: s.opts.endpoint, Err: err}
}

func (s *Store) corrupt(key string, cause error) error {
	return s.opError("decode", key, storage.Wrap(storage.ErrCorrupt, cause))
}

// serverTime reads the object store's clock, bounded by the request timeout.
func (s *Store) serverTime(ctx context.Context) (storage.ServerTime, error) {
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	return s.objects.ServerTime(cctx)
}

// nextRev returns a revision for a write: above every revision this store
// has seen and above floor (the previous version's), and at least the
// store's clock in microseconds, so that writers on different machines
// produce roughly ordered revisions too.
func (s *Store) nextRev(st storage.ServerTime, floor int64) int64 {
	s.revMu.Lock()
	defer s.revMu.Unlock()
	s.lastRev = max(s.lastRev+1, floor+1, st.Now.UnixMicro())
	return s.lastRev
}

// reserveRevs returns the first of n consecutive revisions for writes,
// each as nextRev would give it.
func (s *Store) reserveRevs(st storage.ServerTime, n int) int64 {
	s.revMu.Lock()
	defer s.revMu.Unlock()
	base := max(s.lastRev+1, st.Now.UnixMicro())
	s.lastRev = base + int64(max(n-1, 0))
	return base
}

// observeRev records rev as seen and returns the largest revision seen,
// which a listing reports: never less than an earlier one.
func (s *Store) observeRev(rev int64) int64 {
	s.revMu.Lock()
	defer s.revMu.Unlock()
	s.lastRev = max(s.lastRev, rev)
	return s.lastRev
}

// entry is one object of a prefix as read: its body, or why it could not
// be read.
type entry struct {
	key  string
	etag string
	body []byte
}

// readPrefix lists prefix and returns every object's body, in key order.
// Bodies whose ETag the listing shows unchanged come from the cache, so a
// poll of an idle cluster costs one LIST. Objects that vanish between the
// LIST and the GET are left out.
func (s *Store) readPrefix(ctx context.Context, prefix string) ([]entry, error) {
	infos, err := s.listAll(ctx, prefix)
	if err != nil {
		return nil, s.opError("list", prefix, err)
	}
	out := make([]entry, len(infos))
	var todo []int
	s.cacheMu.Lock()
	for i, info := range infos {
		out[i] = entry{key: info.Key, etag: info.ETag}
		if c, ok := s.cache[info.Key]; ok && c.etag == info.ETag {
			out[i].body = c.body
			continue
		}
		todo = append(todo, i)
	}
	s.cacheMu.Unlock()
	errs := make([]error, len(out))
	gone := make([]bool, len(out))
	parallel(len(todo), readConcurrency, func(n int) {
		i := todo[n]
		obj, err := s.get(ctx, out[i].key)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			gone[i] = true
		case err != nil:
			errs[i] = err
		default:
			out[i].etag, out[i].body = obj.ETag, obj.Body
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	kept := out[:0]
	for i, e := range out {
		if !gone[i] {
			kept = append(kept, e)
		}
	}
	s.cacheMu.Lock()
	for k := range s.cache {
		if strings.HasPrefix(k, prefix) {
			delete(s.cache, k)
		}
	}
	for _, e := range kept {
		s.cache[e.key] = cachedObject{etag: e.etag, body: e.body}
	}
	s.cacheMu.Unlock()
	return kept, nil
}

// listAll lists every key under prefix, each page bounded by the request
// timeout: readPrefix's listing, and the wake poller's.
func (s *Store) listAll(ctx context.Context, prefix string) ([]storage.ObjectInfo, error) {
	var out []storage.ObjectInfo
	after := ""
	for {
		cctx, cancel := s.withTimeout(ctx)
		page, err := s.objects.List(cctx, prefix, storage.ListOptions{StartAfter: after})
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, page.Objects...)
		if !page.Truncated || len(page.Objects) == 0 {
			return out, nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// get reads one object, bounded by the request timeout.
func (s *Store) get(ctx context.Context, key string) (storage.Object, error) {
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	obj, err := s.objects.Get(cctx, key)
	if err != nil {
		return storage.Object{}, s.opError("get", key, err)
	}
	return obj, nil
}

// create, replace and put write one object, bounded by the request timeout.
func (s *Store) create(ctx context.Context, op, key string, body []byte) (string, error) {
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	etag, err := s.objects.Create(cctx, key, body)
	if err != nil {
		return "", s.opError(op, key, err)
	}
	return etag, nil
}

func (s *Store) replace(ctx context.Context, op, key string, body []byte, ifMatch string) (string, error) {
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	etag, err := s.objects.Replace(cctx, key, body, ifMatch)
	if err != nil {
		return "", s.opError(op, key, err)
	}
	return etag, nil
}

func (s *Store) put(ctx context.Context, op, key string, body []byte) (string, error) {
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	etag, err := s.objects.Put(cctx, key, body)
	if err != nil {
		return "", s.opError(op, key, err)
	}
	return etag, nil
}

// parallel calls f(0..n-1) with at most limit calls at once.
func parallel(n, limit int, f func(i int)) {
	if n == 0 {
		return
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}
