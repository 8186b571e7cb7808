package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/embedded"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/runner"
)

// servicesGroups are the shard groups of the two-service cluster: one per
// service.
const servicesGroups = "carts,default"

// runService starts an example service (bin) as runner id of the cluster,
// serving group, with the fast runner settings; addrEnv names the
// variable of its API's address.
func (c *cluster) runService(bin, id, group, addrEnv string) *runnerProc {
	t := c.t
	t.Helper()
	r := c.newRunnerProc(id)
	api, err := embedded.FreeStableAddr()
	if err != nil {
		t.Fatal(err)
	}
	r.args = []string{"runner_id=" + id, "admin_addr=" + r.admin, "etcd.endpoints=" + harness.ProxyURL(r.proxy), "groups=" + group}
	for i := 1; i < len(fastRunner); i += 2 { // --set k=v pairs
		r.args = append(r.args, fastRunner[i])
	}
	r.proc = startBinary(t, bin, "service "+id, []string{"TENURE_CONFIG=" + c.cfgPath, addrEnv + "=" + api}, r.args...)
	c.runners.Add(id, r)
	return r
}

// cartItem and cartSummary are the cart example's input and output.
type cartItem struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

type cartSummary struct {
	Count int `json:"count"`
}

// TestTwoServicesDisjointTypes: two services with disjoint entity types
// (examples/counter hosting "counter", examples/cart hosting "cart"), two
// runner processes each, share one cluster, each serving a shard group of
// its own. A client that names no group calls both types; every call
// succeeds while one runner of each service stops with SIGTERM; each add
// is applied exactly once (the counters' totals and the carts' counts are
// the acknowledged adds); and a type no runner hosts is answered at once,
// not applied, naming the type.
func TestTwoServicesDisjointTypes(t *testing.T) {
	c := newClusterWith(t, "--shard-groups", servicesGroups)
	counters := []*runnerProc{c.runService(counterBinary, "counter-1", "default", "COUNTER_ADDR"),
		c.runService(counterBinary, "counter-2", "default", "COUNTER_ADDR")}
	carts := []*runnerProc{c.runService(cartBinary, "cart-1", "carts", "CART_ADDR"),
		c.runService(cartBinary, "cart-2", "carts", "CART_ADDR")}
	testenv.WaitFor(t, "both groups' shards owned by their services", 60*time.Second, func() bool {
		own := c.owners()
		if len(own) != 2*devShards {
			return false
		}
		for s, r := range own {
			if s.Group == "default" != strings.HasPrefix(r, "counter-") {
				return false
			}
		}
		return true
	})
	c.waitSettled(append(append([]*runnerProc{}, counters...), carts...), 1, 30*time.Second)

	cfg, err := runner.Load(c.cfgPath, nil, []string{"etcd.endpoints=" + c.Etcd, "log.level=warn"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := runner.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	addCount := entity.Operation[int64, int64]{Type: "counter", Name: "Add"}
	addItem := entity.Operation[cartItem, cartSummary]{Type: "cart", Name: "Add"}

	// Callers: each adds to its own counter and cart until told to stop;
	// every call must succeed.
	const callers = 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		acked    [callers]int64
	)
	stop := make(chan struct{})
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint("e", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
				_, err1 := addCount.Call(cctx, cli, id, 1)
				_, err2 := addItem.Call(cctx, cli, id, cartItem{SKU: "tea", Qty: 1})
				ccancel()
				if err := errors.Join(err1, err2); err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %v", id, err))
					mu.Unlock()
					return
				}
				mu.Lock()
				acked[i]++
				mu.Unlock()
			}
		}()
	}
	testenv.WaitFor(t, "every caller's first adds", 30*time.Second, func() bool { return callsDone(&mu, &failures, func() int64 { return minOf(&mu, acked[:]) }, 3) })
	counters[0].signal(t, syscall.SIGTERM)
	carts[0].signal(t, syscall.SIGTERM)
	for _, r := range []*runnerProc{counters[0], carts[0]} {
		if code := r.wait(t, 60*time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM", r.id, code)
		}
	}
	mark := minOf(&mu, acked[:])
	testenv.WaitFor(t, "adds after the stops", 30*time.Second, func() bool { return callsDone(&mu, &failures, func() int64 { return minOf(&mu, acked[:]) }, mark+3) })
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d callers saw a call fail across the SIGTERMs: %s", len(failures), strings.Join(failures, "; "))
	}

	getCount := entity.Operation[struct{}, int64]{Type: "counter", Name: "Get"}
	getCart := entity.Operation[struct{}, cartSummary]{Type: "cart", Name: "Get"}
	for i := range callers {
		id := fmt.Sprint("e", i)
		n, err := getCount.Call(ctx, cli, id, struct{}{})
		if err != nil || n != acked[i] {
			t.Errorf("counter %s: %d, %v; want the %d acknowledged adds", id, n, err, acked[i])
		}
		s, err := getCart.Call(ctx, cli, id, struct{}{})
		if err != nil || int64(s.Count) != acked[i] {
			t.Errorf("cart %s: %d items, %v; want %d", id, s.Count, err, acked[i])
		}
	}
	// A durable task of an operation goes to its type's group too.
	req, err := addItem.Task("tasked", cartItem{SKU: "tea", Qty: 2})
	if err != nil {
		t.Fatal(err)
	}
	tk, _, err := cli.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	done, err := cli.Wait(ctx, tk.Ref(), 50*time.Millisecond)
	if err != nil || done.Status != task.Completed || done.Shard.Group != "carts" || !strings.Contains(string(done.Result), `"count":2`) {
		t.Fatalf("task %s: %+v, %v; want completed in group carts with 2 items", tk.Ref(), done, err)
	}
	start := time.Now()
	_, err = cli.Invoke(ctx, &entity.Message{Type: "ledger", ID: "x", Body: []byte(`1`)})
	if !errors.Is(err, messaging.ErrTypeNotHosted) || messaging.AppliedOf(err) != messaging.AppliedNo || !strings.Contains(err.Error(), "ledger") {
		t.Fatalf("call to a type no runner hosts: %v, want not hosted, not applied, naming the type", err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d callers × %v adds to each type, all acknowledged; a call to an unhosted type answered in %s",
		callers, acked, time.Since(start).Round(time.Millisecond))
}

// callsDone reports whether every caller acknowledged at least min adds
// (or one failed: the test then stops waiting and reports it).
func callsDone(mu *sync.Mutex, failures *[]string, least func() int64, min int64) bool {
	mu.Lock()
	failed := len(*failures) > 0
	mu.Unlock()
	return failed || least() >= min
}

func minOf(mu *sync.Mutex, xs []int64) int64 {
	mu.Lock()
	defer mu.Unlock()
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}
