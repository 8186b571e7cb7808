package messaging_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/routing"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// hostOf is a runner's Deliverer hosting types: it answers the types it
// hosts with "name:type/id@shard" and the others as a host does (no
// handler).
func hostOf(name string, types ...string) *fake {
	return &fake{name: name, fn: func(_ context.Context, d entity.Delivery) ([]byte, error) {
		if !slices.Contains(types, d.Type) {
			return nil, fmt.Errorf("%w: %q", entity.ErrNoHandler, d.Type)
		}
		return fmt.Appendf(nil, "%s:%s/%s@%s", name, d.Type, d.ID, d.Shard), nil
	}}
}

// member registers r in st and locks shards for it; its lease is kept
// alive until the test ends (or leave is called).
func member(t *testing.T, st *etcd.Store, r storage.RunnerInfo, shards ...storage.ShardID) (leave func()) {
	t.Helper()
	ss, err := st.Register(ctxT(t), r, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		storage.KeepAliveLoop(ctx, ss, storage.KeepAliveCadence{}, nil)
	}()
	left := false
	leave = func() {
		if !left {
			left = true
			cancel()
			<-done
			ss.Close(context.Background())
		}
	}
	t.Cleanup(leave)
	if len(shards) == 0 {
		return leave
	}
	res, err := ss.AcquireShards(ctxT(t), shards)
	if err != nil || len(res) != len(shards) || res[0].Status != storage.Acquired {
		t.Fatalf("runner %s acquiring %s: %+v, %v", r.ID, shards, res, err)
	}
	return leave
}

// tableOn runs a routing table on st until the test ends and waits for its
// first listing.
func tableOn(t *testing.T, st *etcd.Store) *routing.Table {
	t.Helper()
	tbl := routing.New(st)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tbl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("table Run: %v", err)
		}
	})
	if err := tbl.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return tbl
}

// TestPlacementByType: two groups whose runners host disjoint types, as
// their records in etcd say. A client configured with the default group
// reaches the other group's runner for a type only that group hosts; a
// type no runner hosts fails at once, not applied and not sent (HTTP 404
// type_not_hosted); and once a runner whose record lists no types joins,
// such a type goes to the client's own group, as before placement by
// type.
func TestPlacementByType(t *testing.T) {
	testenv.CheckLeaks(t)
	st, err := etcd.New(testenv.ClientAt(t, testenv.SharedEtcd(t).Endpoint()), etcd.WithPrefix(testenv.Prefix(t)), etcd.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	carts, invoices := hostOf("a", "cart"), hostOf("b", "invoice")
	srvCfg := testConfig()
	srvCfg.Group = "billing" // the server's own group: it never decides a request's
	defaultShard, billingShard := shard0, storage.ShardID{Group: "billing", Index: 0}
	member(t, st, storage.RunnerInfo{ID: "a", CallAddr: serve(t, carts), Weight: 1, Groups: []string{storage.DefaultGroup}, Types: []string{"cart"}}, defaultShard)
	member(t, st, storage.RunnerInfo{ID: "b", CallAddr: serveCfg(t, invoices, srvCfg), Weight: 1, Groups: []string{"billing"}, Types: []string{"invoice"}}, billingShard)
	tbl := tableOn(t, st)
	testenv.WaitFor(t, "both owners in the table", 10*time.Second, func() bool {
		_, a := tbl.Owner(defaultShard)
		_, b := tbl.Owner(billingShard)
		return a && b
	})
	c, err := messaging.NewClient(tbl, testConfig()) // Group: default
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	// Each type reaches the runner hosting it, in its group.
	for typ, want := range map[string]string{"invoice": "b:invoice/i1@billing/0", "cart": "a:cart/i1@default/0"} {
		got, err := c.Call(ctxT(t), typ, "i1", nil)
		if err != nil || string(got) != want {
			t.Fatalf("Call %s/i1: %q, %v; want %q", typ, got, err, want)
		}
	}
	if d := invoices.lastDelivery(); d.Shard != billingShard {
		t.Fatalf("invoice delivered on shard %s; want %s", d.Shard, billingShard)
	}
	// An operation and a send go the same way.
	if _, err := c.Invoke(ctxT(t), &entity.Message{Type: "invoice", ID: "i2", Op: "Pay", OneWay: true}); err != nil {
		t.Fatal(err)
	}
	if d := invoices.lastDelivery(); d.ID != "i2" || d.Op != "Pay" || !d.OneWay || d.Shard != billingShard {
		t.Fatalf("send delivered as %+v; want invoice/i2 Pay, one way, on %s", d, billingShard)
	}

	// A type no runner hosts: at once, not applied, nothing delivered.
	before := carts.count.Load() + invoices.count.Load()
	start := time.Now()
	_, err = c.Call(ctxT(t), "ghost", "g1", nil)
	took := time.Since(start)
	var ce *messaging.CallError
	if !errors.Is(err, messaging.ErrTypeNotHosted) || !errors.As(err, &ce) || ce.Type != "ghost" || !strings.Contains(err.Error(), `"ghost"`) {
		t.Fatalf("Call ghost/g1: %v; want ErrTypeNotHosted naming the type", err)
	}
	if messaging.AppliedOf(err) != messaging.AppliedNo || messaging.Retryable(err) {
		t.Fatalf("Call ghost/g1: applied %s, retryable %v; want not applied, not retryable", messaging.AppliedOf(err), messaging.Retryable(err))
	}
	if took > 2*time.Second { // the default deadline is 10 s: it did not wait for one
		t.Fatalf("Call ghost/g1 took %s; want it to fail at once", took)
	}
	if n := carts.count.Load() + invoices.count.Load(); n != before {
		t.Fatalf("%d deliveries for a type no runner hosts; want none", n-before)
	}
	hs := httptest.NewServer(messaging.HTTPHandler(c))
	defer hs.Close()
	resp, err := http.Post(hs.URL+"/v1/entities/ghost/g1", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"code":"type_not_hosted","applied":"no"`) {
		t.Fatalf("POST ghost/g1: %d %s; want 404 type_not_hosted, applied no", resp.StatusCode, body)
	}

	// A runner older than placement by type (no types in its record) may
	// host it: the call goes to the client's own group, as it used to.
	leave := member(t, st, storage.RunnerInfo{ID: "old", CallAddr: deadAddr(t), Weight: 1, Groups: []string{storage.DefaultGroup}})
	testenv.WaitFor(t, "the untyped runner in the table", 10*time.Second, func() bool {
		_, h := tbl.PlaceType("ghost", storage.DefaultGroup)
		return h == routing.HostingUnknown
	})
	_, err = c.Call(ctxT(t), "ghost", "g1", nil)
	if !errors.Is(err, messaging.ErrUnknownType) {
		t.Fatalf("Call ghost/g1 beside an untyped runner: %v; want the default group's owner to answer unknown type", err)
	}
	if d := carts.lastDelivery(); d.Type != "ghost" || d.Shard != defaultShard {
		t.Fatalf("ghost delivered as %+v; want on %s", d, defaultShard)
	}
	// Typed types keep their groups meanwhile.
	if got, err := c.Call(ctxT(t), "invoice", "i3", nil); err != nil || string(got) != "b:invoice/i3@billing/0" {
		t.Fatalf("Call invoice/i3 beside an untyped runner: %q, %v", got, err)
	}
	leave()
	testenv.WaitFor(t, "the untyped runner gone", 10*time.Second, func() bool {
		_, h := tbl.PlaceType("ghost", storage.DefaultGroup)
		return h == routing.NotHosted
	})
}

// TestPlacementWithoutTypes: records that list no types (runners older
// than placement by type) route every call to the client's group, as
// before.
func TestPlacementWithoutTypes(t *testing.T) {
	testenv.CheckLeaks(t)
	a := hostOf("a", "cart")
	v := newView()
	v.runner("a", serve(t, a))
	v.lock("a", 3)
	c, _ := v.client(t)
	if got, err := c.Call(ctxT(t), "cart", "c1", nil); err != nil || string(got) != "a:cart/c1@default/0" {
		t.Fatalf("Call cart/c1: %q, %v", got, err)
	}
	if _, err := c.Call(ctxT(t), "ghost", "g1", nil); !errors.Is(err, messaging.ErrUnknownType) {
		t.Fatalf("Call ghost/g1: %v; want the owner's unknown type", err)
	}
}
