// Command cart is a shopping-cart service that embeds a Tenure runner: the
// entity type "cart" (cart.go), defined by its operations, with its items
// as durable state and a reminder that empties a cart left idle for 30
// minutes, behind an HTTP API of its own:
//
//	POST   /carts/{id}/items        {"sku": "tea", "qty": 2}   add
//	DELETE /carts/{id}/items/{sku}                              remove
//	GET    /carts/{id}                                          read
//	POST   /carts/{id}/checkout                                 check out
//
// Every answer is the cart's Summary as JSON, or the error of the call
// (messaging.WriteError: an application error as 4xx with its code).
//
// It reads the runner config as `tenure run` does ($TENURE_CONFIG, else
// ./.tenure-dev/tenure.yaml, then TENURE_* variables, then key=value
// arguments); CART_ADDR is the API's address (default 127.0.0.1:8090).
// SIGTERM or Ctrl-C stops the API, then the runner.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/runner"
)

func main() {
	cfg, err := runner.Load("", os.Environ(), os.Args[1:])
	if err != nil {
		log.Fatal(err)
	}
	r, err := runner.New(cfg, runner.WithEntities(Carts))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: cmp.Or(os.Getenv("CART_ADDR"), "127.0.0.1:8090"), ReadHeaderTimeout: 5 * time.Second}
	if err := r.Serve(ctx, srv, func(c *runner.Client) http.Handler { return api(c) }); err != nil {
		log.Fatal(err)
	}
}

// api is the cart's HTTP API over c (the runner's client, or a
// tenuretest.Unit in tests).
func api(c entity.Caller) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /carts/{id}/items", func(w http.ResponseWriter, r *http.Request) {
		var it Item
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&it); err != nil {
			messaging.WriteError(w, entity.NewAppError(entity.CodeInvalid, "body: want {\"sku\": …, \"qty\": …}: "+err.Error()))
			return
		}
		answer(w)(addItem.Call(r.Context(), c, r.PathValue("id"), it))
	})
	mux.HandleFunc("DELETE /carts/{id}/items/{sku}", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(removeItem.Call(r.Context(), c, r.PathValue("id"), r.PathValue("sku")))
	})
	mux.HandleFunc("GET /carts/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(getCart.Call(r.Context(), c, r.PathValue("id"), struct{}{}))
	})
	mux.HandleFunc("POST /carts/{id}/checkout", func(w http.ResponseWriter, r *http.Request) {
		answer(w)(checkout.Call(r.Context(), c, r.PathValue("id"), struct{}{}))
	})
	return mux
}

// answer writes a call's summary, or its error.
func answer(w http.ResponseWriter) func(Summary, error) {
	return func(s Summary, err error) {
		if err != nil {
			messaging.WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s)
	}
}
