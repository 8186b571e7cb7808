package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
)

// api is the service's own HTTP API. It is a client of the cluster like any
// other: it submits tasks to S3 and wakes their shard's owner through etcd,
// wherever that owner runs (this process or another). Its client shares
// the embedded runner's connections (serve sets it once the runner has
// connected).
type api struct {
	tasks *runner.Client
	log   *slog.Logger
	// wait bounds how long a request waits for its task's result. The task
	// is durable once submitted: a request that gives up still leaves it to
	// run, and says so (202 with the task ref).
	wait time.Duration
}

// addResponse is the reply to POST /counters/{id}/add.
type addResponse struct {
	Counter string `json:"counter"`
	Total   int64  `json:"total"`
	Runner  string `json:"runner,omitempty"`
	Task    string `json:"task"`
}

// pendingResponse is the reply when the wait ran out before the task ended.
type pendingResponse struct {
	Task   string `json:"task"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

func (a *api) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /counters/{id}/add", a.add)
	return mux
}

// add submits {"add": n} to counter id and waits for the new total. An
// Idempotency-Key header becomes the task id, so that a client retrying
// after a lost response gets the same task (and the same total) instead of
// adding twice.
func (a *api) add(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := task.ValidateEntity(id); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("counter id: %w", err))
		return
	}
	n, err := parseN(r.URL.Query().Get("n"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key != "" {
		if err := task.ValidateID(key); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("Idempotency-Key: %w", err))
			return
		}
	}
	t, _, err := task.SubmitInput(r.Context(), a.tasks, task.SubmitRequest{ID: key, Type: counterType, Entity: id}, addInput{Add: &n})
	switch {
	case errors.Is(err, task.ErrConflict):
		writeError(w, http.StatusConflict, err)
		return
	case errors.Is(err, task.ErrInvalid):
		writeError(w, http.StatusBadRequest, err)
		return
	case err != nil:
		a.log.Warn("submit failed", "counter", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.wait)
	defer cancel()
	done, err := a.tasks.Wait(ctx, t.Ref(), 200*time.Millisecond)
	if err != nil {
		// Submitted but not finished within the wait (or the client left):
		// the task runs anyway.
		status := string(task.Pending)
		if done != nil {
			status = string(done.Status)
		}
		writeJSON(w, http.StatusAccepted, pendingResponse{Task: t.Ref(), Status: status,
			Detail: "submitted; no result within " + a.wait.String() + ": `tenure task get " + t.Ref() + "` shows it"})
		return
	}
	// A failed or cancelled task, or a result of another shape, is the
	// cluster's failure, not the request's.
	res, err := task.Result[addResult](done)
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, http.StatusOK, addResponse{Counter: res.Counter, Total: res.Total, Runner: res.Runner, Task: done.Ref()})
}

// parseN parses the n query parameter: an integer in [-maxAdd, maxAdd].
func parseN(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("query parameter n is missing (POST /counters/{id}/add?n=3)")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < -maxAdd || n > maxAdd {
		return 0, fmt.Errorf("query parameter n = %q: want an integer in [%d, %d]", s, -maxAdd, maxAdd)
	}
	return n, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
