package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/tenuretest"
)

// TestCartAbandonedAfterIdle: a cart with items is emptied by its abandon
// reminder once it has been idle for AbandonAfter, and not before; every
// Add re-arms the reminder; what the operations changed is what a runner
// would have saved. Runs in memory, with a fake clock.
func TestCartAbandonedAfterIdle(t *testing.T) {
	start := time.Now()
	u := tenuretest.New(t, Carts)
	ctx := context.Background()
	if _, err := addItem.Call(ctx, u, "alice", Item{SKU: "tea", Qty: 2}); err != nil {
		t.Fatal(err)
	}
	if err := u.Advance(20 * time.Minute); err != nil {
		t.Fatal(err)
	}
	sum, err := addItem.Call(ctx, u, "alice", Item{SKU: "tea", Qty: 1}) // re-arms: due 30 min from now
	if err != nil || sum.Count != 3 || len(sum.Items) != 1 {
		t.Fatalf("second add: %+v, %v", sum, err)
	}
	if rs := u.Reminders("cart", "alice"); len(rs) != 1 || rs[0].Op != "Abandon" {
		t.Fatalf("reminders: %+v, want the one abandon", rs)
	}
	if err := u.Advance(29 * time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := tenuretest.State[Cart](u, "cart", "alice"); got.Status != "open" || len(got.Items) != 1 {
		t.Fatalf("after 29 idle minutes: %+v, want the cart open", got)
	}
	if err := u.Advance(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := tenuretest.State[Cart](u, "cart", "alice"); got.Status != "abandoned" || len(got.Items) != 0 {
		t.Fatalf("after 31 idle minutes: %+v, want it abandoned and empty", got)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Logf("took %s (the acceptance asks for under 100ms)", took)
	}
}

// TestCartCheckout: checkout keeps the items, cancels the abandon
// reminder and closes the cart to further adds (an application error);
// the reader answers without saving; the state survives passivation.
func TestCartCheckout(t *testing.T) {
	u := tenuretest.New(t, Carts)
	ctx := context.Background()
	for _, it := range []Item{{SKU: "tea", Qty: 1}, {SKU: "cups", Qty: 4}} {
		if _, err := addItem.Call(ctx, u, "bob", it); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := removeItem.Call(ctx, u, "bob", "cups"); err != nil {
		t.Fatal(err)
	}
	saves := u.Saves("cart", "bob")
	if sum, err := getCart.Call(ctx, u, "bob", struct{}{}); err != nil || sum.Count != 1 {
		t.Fatalf("get: %+v, %v", sum, err)
	}
	if u.Saves("cart", "bob") != saves {
		t.Fatal("a read saved the state")
	}
	if _, err := checkout.Call(ctx, u, "bob", struct{}{}); err != nil {
		t.Fatal(err)
	}
	if rs := u.Reminders("cart", "bob"); len(rs) != 0 {
		t.Fatalf("reminders after checkout: %+v", rs)
	}
	u.Passivate("cart", "bob")
	_, err := addItem.Call(ctx, u, "bob", Item{SKU: "tea", Qty: 1})
	var ae *entity.AppError
	if !errors.As(err, &ae) || ae.Code != entity.CodeConflict {
		t.Fatalf("add after checkout: %v, want a conflict", err)
	}
	if err := u.Advance(time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := tenuretest.State[Cart](u, "cart", "bob"); got.Status != "checked_out" || len(got.Items) != 1 {
		t.Fatalf("state: %+v", got)
	}
}

// TestCartAPI: the HTTP API answers the summary of each operation, and
// an application error with its status and code (409 for an add after
// checkout, 400 for a bad body, 404 for a missing item).
func TestCartAPI(t *testing.T) {
	srv := httptest.NewServer(api(tenuretest.New(t, Carts)))
	defer srv.Close()
	do := func(method, path, body string, want int) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %v, want %d", method, path, resp.StatusCode, out, want)
		}
		return out
	}
	do("POST", "/carts/c1/items", `{"sku":"tea","qty":2}`, 200)
	do("POST", "/carts/c1/items", `{"sku":"cups","qty":1}`, 200)
	if got := do("DELETE", "/carts/c1/items/cups", "", 200); got["count"] != 2.0 {
		t.Fatalf("after the delete: %v", got)
	}
	do("DELETE", "/carts/c1/items/cups", "", 404)
	do("POST", "/carts/c1/items", `{"sku":`, 400)
	if got := do("GET", "/carts/c1", "", 200); got["status"] != "open" || got["count"] != 2.0 {
		t.Fatalf("get: %v", got)
	}
	do("POST", "/carts/c1/checkout", "", 200)
	if got := do("POST", "/carts/c1/items", `{"sku":"tea","qty":1}`, 409); got["app_code"] != "conflict" {
		t.Fatalf("add after checkout: %v", got)
	}
}
