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

// memHarness runs the suite on memstore: a store per namespace, shared by
// the namespace's runner stores, each behind a gate of its own.
func memHarness(t *testing.T) storagetest.RunnerStoreHarness {
	var b backend
	var mu sync.Mutex
	gates := map[storage.RunnerStore]*gate{}
	counts := map[storage.RunnerStore]*counted{}
	gateOf := func(t *testing.T, s storage.RunnerStore) *gate {
		mu.Lock()
		defer mu.Unlock()
		g, ok := gates[s]
		if !ok {
			t.Fatal("store not opened by this harness")
		}
		return g
	}
	n := 0
	return storagetest.RunnerStoreHarness{
		Namespace: func(t *testing.T) string {
			mu.Lock()
			n++
			ns := fmt.Sprintf("mem-%d", n)
			mu.Unlock()
			b.add(ns, memstore.New())
			t.Cleanup(func() { b.remove(ns) })
			return ns
		},
		Open: func(t *testing.T, ns string) storage.RunnerStore {
			g := &gate{ObjectStore: b.of(t, ns)}
			c := &counted{ObjectStore: g}
			s, err := s3coord.New(c, storeOpts("mem:"+ns)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			mu.Lock()
			gates[s], counts[s] = g, c
			mu.Unlock()
			return s
		},
		RevokeLease: b.revoke,
		DeleteKey: func(t *testing.T, ns, key string) {
			if err := b.of(t, ns).Delete(ctxT(t), key); err != nil {
				t.Fatal(err)
			}
		},
		PutRaw: func(t *testing.T, ns, key string, value []byte) {
			if _, err := b.of(t, ns).Put(ctxT(t), key, value); err != nil {
				t.Fatal(err)
			}
		},
		Isolate: func(t *testing.T, s storage.RunnerStore) func() { return gateOf(t, s).isolate() },
		Disconnect: func(t *testing.T, s storage.RunnerStore) func() {
			heal := gateOf(t, s).disconnect()
			mu.Lock()
			c := counts[s]
			mu.Unlock()
			return healAfterNoticed(t, c, heal)
		},
		// Polling keeps no history to compact: a watcher cut off re-lists
		// whatever happened.
		Compact:        func(t *testing.T) {},
		WatchDelay:     testWatchDelay,
		WatchCoalesces: true,
	}
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
	var b backend
	var mu sync.Mutex
	proxies := map[storage.RunnerStore]*testenv.Proxy{}
	counts := map[storage.RunnerStore]*counted{}
	proxyOf := func(t *testing.T, s storage.RunnerStore) *testenv.Proxy {
		mu.Lock()
		defer mu.Unlock()
		p, ok := proxies[s]
		if !ok {
			t.Fatal("store not opened by this harness")
		}
		return p
	}
	direct := gw.OwnClient(t)
	return storagetest.RunnerStoreHarness{
		Namespace: func(t *testing.T) string {
			bucket := gw.Bucket(t)
			o, err := s3.New(direct, bucket, s3.WithRequestTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			b.add(bucket, o)
			t.Cleanup(func() { b.remove(bucket) })
			return bucket
		},
		Open: func(t *testing.T, ns string) storage.RunnerStore {
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
			c := &counted{ObjectStore: o}
			s, err := s3coord.New(c, storeOpts(p.Addr()+"/"+ns)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			mu.Lock()
			proxies[s], counts[s] = p, c
			mu.Unlock()
			return s
		},
		RevokeLease: b.revoke,
		DeleteKey: func(t *testing.T, ns, key string) {
			if err := b.of(t, ns).Delete(ctxT(t), key); err != nil {
				t.Fatal(err)
			}
		},
		PutRaw: func(t *testing.T, ns, key string, value []byte) {
			if _, err := b.of(t, ns).Put(ctxT(t), key, value); err != nil {
				t.Fatal(err)
			}
		},
		Isolate: func(t *testing.T, s storage.RunnerStore) func() {
			p := proxyOf(t, s)
			p.SetMode(testenv.Blackhole)
			return func() { p.SetMode(testenv.Pass) }
		},
		Disconnect: func(t *testing.T, s storage.RunnerStore) func() {
			p := proxyOf(t, s)
			p.SetMode(testenv.Reset)
			mu.Lock()
			c := counts[s]
			mu.Unlock()
			return healAfterNoticed(t, c, func() { p.SetMode(testenv.Pass) })
		},
		Compact:        func(t *testing.T) {},
		WatchDelay:     testWatchDelay * raceSlowdown,
		WatchCoalesces: true,
		// The gateway's Date headers trail its clock by up to
		// s3.DefaultDateResolution, so a fresh clock estimate is about
		// that wide: a lease is judged lapsed up to that much past its
		// TTL (its writer's latest reading plus the reader's earliest),
		// on top of etcd's second.
		LeaseSlack: time.Second + s3.DefaultDateResolution,
	}
}

func TestConformance(t *testing.T) {
	storagetest.TestRunnerStore(t, s3Harness(t))
}

func TestConformanceMemstore(t *testing.T) {
	storagetest.TestRunnerStore(t, memHarness(t))
}
