package messaging_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/routing"
	"github.com/tenurehq/tenure/storage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// shard0 is every entity's shard: the tests' config has one shard.
var shard0 = storage.ShardID{Group: storage.DefaultGroup, Index: 0}

func testConfig() messaging.Config {
	cfg := messaging.DefaultConfig()
	cfg.Shards = 1
	cfg.DefaultTimeout = 10 * time.Second
	return cfg
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fake is a Deliverer whose behaviour the test sets; it counts deliveries
// and keeps the last one.
type fake struct {
	name  string
	fn    func(ctx context.Context, d entity.Delivery) ([]byte, error)
	count atomic.Int64
	mu    sync.Mutex
	last  entity.Delivery
}

func (f *fake) Deliver(ctx context.Context, d entity.Delivery) ([]byte, error) {
	f.count.Add(1)
	f.mu.Lock()
	f.last = d
	f.mu.Unlock()
	if f.fn != nil {
		return f.fn(ctx, d)
	}
	return append([]byte(f.name+":"), d.Body...), nil
}

func (f *fake) lastDelivery() entity.Delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// serve starts a Server delivering to d on a loopback port and returns its
// address; it stops at cleanup.
func serve(t testing.TB, d messaging.Deliverer, opts ...messaging.Option) string {
	t.Helper()
	return serveCfg(t, d, testConfig(), opts...)
}

// serveCfg is serve with a configuration of the server's own.
func serveCfg(t testing.TB, d messaging.Deliverer, cfg messaging.Config, opts ...messaging.Option) string {
	t.Helper()
	srv, err := messaging.NewServer(d, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lis := listen(t)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// reply is the outcome of a Call made in the background.
type reply struct {
	body []byte
	err  error
}

// goCall calls (echo, id) through c in the background with ctx.
func goCall(ctx context.Context, c *messaging.Client, id string) <-chan reply {
	done := make(chan reply, 1)
	go func() {
		body, err := c.Call(ctx, "echo", id, []byte("hi"))
		done <- reply{body, err}
	}()
	return done
}

// listen returns a listener on a free loopback port.
func listen(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// deadAddr returns a loopback address that refuses connections.
func deadAddr(t testing.TB) string {
	t.Helper()
	lis := listen(t)
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// view feeds a routing table synthetic membership batches.
type view struct {
	tbl *routing.Table
	rev int64
}

func newView() *view {
	v := &view{tbl: routing.New(nil)}
	v.tbl.Apply(storage.MembershipBatch{Revision: 1, Listing: true})
	v.rev = 1
	return v
}

// runner records runner id with call address addr.
func (v *view) runner(id, addr string, types ...string) {
	v.rev++
	v.tbl.Apply(storage.MembershipBatch{Revision: v.rev, Events: []storage.MembershipEvent{{Runner: &storage.RunnerEvent{
		Kind: storage.EventPut, ID: id, Runner: storage.RunnerInfo{ID: id, CallAddr: addr, Types: types}, Revision: v.rev}}}})
}

// lock gives shard0 to runner id under epoch.
func (v *view) lock(id string, epoch int64) {
	v.rev++
	v.tbl.Apply(storage.MembershipBatch{Revision: v.rev, Events: []storage.MembershipEvent{{Lock: &storage.LockEvent{
		Kind: storage.EventPut, Shard: shard0, Lock: storage.ShardLock{Shard: shard0, RunnerID: id, Epoch: epoch}, Revision: v.rev}}}})
}

// unlock removes shard0's lock: the shard has no holder.
func (v *view) unlock() {
	v.rev++
	v.tbl.Apply(storage.MembershipBatch{Revision: v.rev, Events: []storage.MembershipEvent{{Lock: &storage.LockEvent{
		Kind: storage.EventDelete, Shard: shard0, Revision: v.rev}}}})
}

// client returns a Client on v's table, closed at cleanup, and the registry
// its metrics are in.
func (v *view) client(t testing.TB, opts ...messaging.Option) (*messaging.Client, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := messaging.NewClient(v.tbl, testConfig(), append([]messaging.Option{messaging.WithRegisterer(reg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, reg
}

// counter reads a counter of reg by name and label values ("" name
// matches any family).
func counter(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
