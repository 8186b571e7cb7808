// Command counter is a Go service that embeds a Tenure runner: the
// entity type "counter", defined by its operations (Add, and the read-only
// Get), with its total as durable state in S3, and an HTTP API of its own
// that calls Add with the runner's client.
//
// It reads the runner config as `tenure run` does ($TENURE_CONFIG, else
// ./.tenure-dev/tenure.yaml as `tenure dev` writes it, then TENURE_*
// variables, then key=value arguments), so it joins the cluster that
// `tenure dev --runners 0` starts; COUNTER_ADDR is the API's address
// (default 127.0.0.1:8080). SIGTERM or Ctrl-C stops it gracefully: the
// API first, then the runner, which hands its shards over. See README.md.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/runner"
)

// Counter is a durable counter: Total is its state in S3, saved after
// each Add that changes it.
type Counter struct {
	Total int64 `json:"total"`
}

// Add adds n to the total and returns the new total.
func (c *Counter) Add(_ entity.Context, n int64) (int64, error) {
	if n < -1e9 || n > 1e9 {
		return 0, entity.NewAppError(entity.CodeInvalid, "n must be in [-1e9, 1e9]")
	}
	c.Total += n
	return c.Total, nil
}

// Get returns the total; it changes nothing.
func (c *Counter) Get(entity.Context) (int64, error) { return c.Total, nil }

// counters is the entity type: Get changes nothing, and runs when a call
// names no operation.
var counters = entity.Define[Counter]("counter", nil, entity.ReadOnly("Get"), entity.Default("Get"))

// main runs the service on the runner config `tenure run` would find
// ($TENURE_CONFIG, else ./.tenure-dev/tenure.yaml), with key=value
// arguments over it, until SIGTERM or Ctrl-C.
func main() {
	cfg, err := runner.Load("", os.Environ(), os.Args[1:])
	if err != nil {
		log.Fatal(err)
	}
	r, err := runner.New(cfg, runner.WithEntities(counters))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The API: POST /counters/{id}/add?n=N answers {"total": T}.
	srv := &http.Server{Addr: cmp.Or(os.Getenv("COUNTER_ADDR"), "127.0.0.1:8080"), ReadHeaderTimeout: 5 * time.Second}
	if err := r.Serve(ctx, srv, func(c *runner.Client) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /counters/{id}/add", func(w http.ResponseWriter, r *http.Request) {
			n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
			if err != nil {
				http.Error(w, "n: want an integer", http.StatusBadRequest)
				return
			}
			total, err := entity.Call[int64](r.Context(), c, "counter", r.PathValue("id"), "Add", n)
			if err != nil {
				messaging.WriteError(w, err) // the status of the error's kind
				return
			}
			json.NewEncoder(w).Encode(map[string]int64{"total": total})
		})
		return mux
	}); err != nil {
		log.Fatal(err)
	}
}
