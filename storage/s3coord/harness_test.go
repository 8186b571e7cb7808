package s3coord_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/memstore"
	"github.com/tenurehq/tenure/storage/s3"
	"github.com/tenurehq/tenure/storage/s3coord"
	"github.com/tenurehq/tenure/storage/storagetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Poll bounds of the stores the conformance suite opens: a short minimum,
// so that a handoff woken by the lock watch is quick, and a maximum short
// enough that a lapsed lease shows well within the suite's expiry bound.
const (
	testMinPoll = 20 * time.Millisecond
	testMaxPoll = 250 * time.Millisecond
	// testWatchDelay is the bound the suite holds these watches to: the
	// minimum poll interval, a poll's reads and the acquire's own
	// requests, with room for a machine shared by several test binaries.
	testWatchDelay = 150 * time.Millisecond
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// backend is what a harness acts on behind the stores' backs: the object
// store of each namespace, read and written directly.
type backend struct {
	mu  sync.Mutex
	nss map[string]storage.ObjectStore
}

func (b *backend) add(ns string, o storage.ObjectStore) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.nss == nil {
		b.nss = map[string]storage.ObjectStore{}
	}
	b.nss[ns] = o
}

func (b *backend) remove(ns string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.nss, ns)
}

func (b *backend) of(t *testing.T, ns string) storage.ObjectStore {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.nss[ns]
	if !ok {
		t.Fatalf("namespace %q not made by this harness", ns)
	}
	return o
}

// revoke tombstones the runner record bound to lease, as Session.Close
// does: a Replace If-Match of the version read.
func (b *backend) revoke(t *testing.T, lease int64) {
	b.mu.Lock()
	all := make([]storage.ObjectStore, 0, len(b.nss))
	for _, o := range b.nss {
		all = append(all, o)
	}
	b.mu.Unlock()
	ctx := ctxT(t)
	for _, o := range all {
		for info, err := range storage.Walk(ctx, o, "runners/", "", 0) {
			if err != nil {
				t.Fatal(err)
			}
			obj, err := o.Get(ctx, info.Key)
			if err != nil {
				t.Fatal(err)
			}
			var rec struct {
				Lease     int64 `json:"lease"`
				Tombstone bool  `json:"tombstone"`
			}
			if json.Unmarshal(obj.Body, &rec) != nil || rec.Lease != lease || rec.Tombstone {
				continue
			}
			body := tombstoneOf(t, obj.Body)
			if _, err := o.Replace(ctx, info.Key, body, obj.ETag); err != nil {
				t.Fatalf("revoke lease %x: %v", lease, err)
			}
			return
		}
	}
	t.Fatalf("revoke lease %x: no runner record holds it", lease)
}

// tombstoneOf returns the tombstone of a runner record's body.
func tombstoneOf(t *testing.T, body []byte) []byte {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	var rev int64
	if err := json.Unmarshal(raw["rev"], &rev); err != nil {
		t.Fatal(err)
	}
	delete(raw, "runner")
	raw["tombstone"] = json.RawMessage("true")
	raw["rev"] = json.RawMessage(fmt.Sprint(rev + 1))
	out, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// counted counts an object store's failed listings, so that a harness can
// wait until a store's poller has met a disconnection: a cut that no
// request met is no interruption of a polling watch.
type counted struct {
	storage.ObjectStore
	listFails atomic.Int64
}

func (c *counted) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListPage, error) {
	page, err := c.ObjectStore.List(ctx, prefix, opts)
	if err != nil {
		c.listFails.Add(1)
	}
	return page, err
}

// ServerTime counts as a listing: a poll reads the clock first.
func (c *counted) ServerTime(ctx context.Context) (storage.ServerTime, error) {
	st, err := c.ObjectStore.ServerTime(ctx)
	if err != nil {
		c.listFails.Add(1)
	}
	return st, err
}

// healAfterNoticed returns heal wrapped so that it first waits for a
// listing of c to have failed after the cut.
func healAfterNoticed(t *testing.T, c *counted, heal func()) func() {
	before := c.listFails.Load()
	return func() {
		testenv.WaitFor(t, "a poll to meet the disconnection", 10*time.Second, func() bool { return c.listFails.Load() > before })
		heal()
	}
}

// gate is an object store in front of another that a test can cut off:
// isolated, every call hangs until its context ends; disconnected, every
// call fails at once.
type gate struct {
	storage.ObjectStore
	mu           sync.Mutex
	isolated     chan struct{} // closed on heal; nil when passing
	disconnected bool
}

func (g *gate) check(ctx context.Context, op string) error {
	g.mu.Lock()
	iso, disc := g.isolated, g.disconnected
	g.mu.Unlock()
	if disc {
		return &storage.OpError{Backend: "mem", Op: op, Err: fmt.Errorf("%w: disconnected", storage.ErrUnavailable)}
	}
	if iso != nil {
		select {
		case <-iso:
		case <-ctx.Done():
			return &storage.OpError{Backend: "mem", Op: op, Err: storage.Wrap(storage.ErrUnavailable, ctx.Err())}
		}
	}
	return nil
}

func (g *gate) Create(ctx context.Context, key string, body []byte) (string, error) {
	if err := g.check(ctx, "create"); err != nil {
		return "", err
	}
	return g.ObjectStore.Create(ctx, key, body)
}

func (g *gate) Replace(ctx context.Context, key string, body []byte, ifMatch string) (string, error) {
	if err := g.check(ctx, "replace"); err != nil {
		return "", err
	}
	return g.ObjectStore.Replace(ctx, key, body, ifMatch)
}

func (g *gate) Put(ctx context.Context, key string, body []byte) (string, error) {
	if err := g.check(ctx, "put"); err != nil {
		return "", err
	}
	return g.ObjectStore.Put(ctx, key, body)
}

func (g *gate) Get(ctx context.Context, key string) (storage.Object, error) {
	if err := g.check(ctx, "get"); err != nil {
		return storage.Object{}, err
	}
	return g.ObjectStore.Get(ctx, key)
}

func (g *gate) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if err := g.check(ctx, "head"); err != nil {
		return storage.ObjectInfo{}, err
	}
	return g.ObjectStore.Head(ctx, key)
}

func (g *gate) Delete(ctx context.Context, key string) error {
	if err := g.check(ctx, "delete"); err != nil {
		return err
	}
	return g.ObjectStore.Delete(ctx, key)
}

func (g *gate) DeleteIfMatch(ctx context.Context, key, ifMatch string) error {
	if err := g.check(ctx, "delete"); err != nil {
		return err
	}
	return g.ObjectStore.DeleteIfMatch(ctx, key, ifMatch)
}

func (g *gate) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListPage, error) {
	if err := g.check(ctx, "list"); err != nil {
		return storage.ListPage{}, err
	}
	return g.ObjectStore.List(ctx, prefix, opts)
}

func (g *gate) ServerTime(ctx context.Context) (storage.ServerTime, error) {
	if err := g.check(ctx, "servertime"); err != nil {
		return storage.ServerTime{}, err
	}
	return g.ObjectStore.ServerTime(ctx)
}

func (g *gate) isolate() func() {
	ch := make(chan struct{})
	g.mu.Lock()
	g.isolated = ch
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.isolated = nil
		g.mu.Unlock()
		close(ch)
	}
}

func (g *gate) disconnect() func() {
	g.mu.Lock()
	g.disconnected = true
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.disconnected = false
		g.mu.Unlock()
	}
}

func storeOpts(endpoint string) []s3coord.Option {
	return []s3coord.Option{
		s3coord.WithRequestTimeout(2 * time.Second),
		s3coord.WithPollInterval(testMinPoll, testMaxPoll),
		s3coord.WithEndpoint(endpoint),
	}
}

// harness is what the memstore and VersityGW harnesses share: the
// backend they act on behind the stores' backs, and the cuts of each store
// they opened. The two differ in how a namespace is made, how a store
// reaches it, and how that path is cut.
type harness struct {
	b  backend
	mu sync.Mutex
	// stores gives the cuts of each store opened, by store.
	stores map[storage.RunnerStore]cuts
}

// cuts is one store's path to its namespace: its listings counted, and
// the two ways to cut it, each returning the heal.
type cuts struct {
	counted    *counted
	isolate    func() (heal func())
	disconnect func() (heal func())
}

// open opens a store on o (its listings counted), named endpoint, whose
// path is cut by isolate and disconnect.
func (h *harness) open(t *testing.T, o storage.ObjectStore, endpoint string, isolate, disconnect func() func()) storage.RunnerStore {
	c := &counted{ObjectStore: o}
	s, err := s3coord.New(c, storeOpts(endpoint)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h.mu.Lock()
	if h.stores == nil {
		h.stores = map[storage.RunnerStore]cuts{}
	}
	h.stores[s] = cuts{counted: c, isolate: isolate, disconnect: disconnect}
	h.mu.Unlock()
	return s
}

func (h *harness) cutsOf(t *testing.T, s storage.RunnerStore) cuts {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.stores[s]
	if !ok {
		t.Fatal("store not opened by this harness")
	}
	return c
}

// suite is the conformance harness of namespace and open, with what the
// two backends share: the backend's writes, the cuts, and the watches'
// bounds.
func (h *harness) suite(namespace func(t *testing.T) string, open func(t *testing.T, ns string) storage.RunnerStore) storagetest.RunnerStoreHarness {
	return storagetest.RunnerStoreHarness{
		Namespace:   namespace,
		Open:        open,
		RevokeLease: h.b.revoke,
		DeleteKey: func(t *testing.T, ns, key string) {
			if err := h.b.of(t, ns).Delete(ctxT(t), key); err != nil {
				t.Fatal(err)
			}
		},
		PutRaw: func(t *testing.T, ns, key string, value []byte) {
			if _, err := h.b.of(t, ns).Put(ctxT(t), key, value); err != nil {
				t.Fatal(err)
			}
		},
		Isolate: func(t *testing.T, s storage.RunnerStore) func() { return h.cutsOf(t, s).isolate() },
		Disconnect: func(t *testing.T, s storage.RunnerStore) func() {
			c := h.cutsOf(t, s)
			return healAfterNoticed(t, c.counted, c.disconnect())
		},
		// Polling keeps no history to compact: a watcher cut off re-lists
		// whatever happened.
		Compact:        func(t *testing.T) {},
		WatchDelay:     testWatchDelay,
		WatchCoalesces: true,
	}
}

// memHarness runs the suite on memstore: a store per namespace, shared by
// the namespace's runner stores, each behind a gate of its own.
func memHarness(t *testing.T) storagetest.RunnerStoreHarness {
	h := &harness{}
	n := 0
	return h.suite(
		func(t *testing.T) string {
			h.mu.Lock()
			n++
			ns := fmt.Sprintf("mem-%d", n)
			h.mu.Unlock()
			h.b.add(ns, memstore.New())
			t.Cleanup(func() { h.b.remove(ns) })
			return ns
		},
		func(t *testing.T, ns string) storage.RunnerStore {
			g := &gate{ObjectStore: h.b.of(t, ns)}
			return h.open(t, g, "mem:"+ns, g.isolate, g.disconnect)
		},
	)
}

// s3Harness runs the suite on the shared VersityGW gateway: a bucket per
// namespace, and a storage/s3 store per runner store, each through its own
// proxy so that the suite can partition one store from the gateway.
func s3Harness(t *testing.T) storagetest.RunnerStoreHarness {
	gw := testenv.SharedS3(t)
	u, err := url.Parse(gw.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{}
	direct := gw.OwnClient(t)
	suite := h.suite(
		func(t *testing.T) string {
			bucket := gw.Bucket(t)
			o, err := s3.New(direct, bucket, s3.WithRequestTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			h.b.add(bucket, o)
			t.Cleanup(func() { h.b.remove(bucket) })
			return bucket
		},
		func(t *testing.T, ns string) storage.RunnerStore {
			p := testenv.NewProxy(t, u.Host)
			access, secret := gw.Credentials()
			cli := testenv.NewS3Client("http://"+p.Addr(), gw.Region(), access, secret)
			tr := http.DefaultTransport.(*http.Transport).Clone()
			t.Cleanup(tr.CloseIdleConnections)
			cli = awss3.New(cli.Options(), func(o *awss3.Options) { o.HTTPClient = &http.Client{Transport: tr} })
			o, err := s3.New(cli, ns, s3.WithRequestTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			heal := func() { p.SetMode(testenv.Pass) }
			isolate := func() func() { p.SetMode(testenv.Blackhole); return heal }
			disconnect := func() func() { p.SetMode(testenv.Reset); return heal }
			return h.open(t, o, p.Addr()+"/"+ns, isolate, disconnect)
		},
	)
	suite.WatchDelay = testWatchDelay * raceSlowdown
	// The gateway's Date headers trail its clock by up to
	// s3.DefaultDateResolution, so a fresh clock estimate is about
	// that wide: a lease is judged lapsed up to that much past its
	// TTL (its writer's latest reading plus the reader's earliest),
	// on top of etcd's second.
	suite.LeaseSlack = time.Second + s3.DefaultDateResolution
	return suite
}

func TestConformance(t *testing.T) {
	storagetest.TestRunnerStore(t, s3Harness(t))
}

func TestConformanceMemstore(t *testing.T) {
	storagetest.TestRunnerStore(t, memHarness(t))
}
