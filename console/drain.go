package console

import (
	"context"
	"fmt"
	"net/http"

	"github.com/tenurehq/tenure/storage"
)

// runnerNamed returns the live runner id, or a 404.
func runnerNamed(runners []storage.RunnerInfo, id string) (storage.RunnerInfo, error) {
	for _, r := range runners {
		if r.ID == id {
			return r, nil
		}
	}
	return storage.RunnerInfo{}, NewError(http.StatusNotFound, CodeNotFound, fmt.Errorf("runner %q: no such live runner", id))
}

// drainReply is POST runners/{id}/drain.
type drainReply struct {
	Runner   string `json:"runner"`
	Draining bool   `json:"draining"`
}

// drain starts a drain of a runner: its own POST /admin/drain, which
// the serving runner calls with its credential (or, for itself, its
// Drain).
func (a *API) drain(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	runners, _, err := a.d.Store.Runners(ctx)
	if err != nil && len(runners) == 0 {
		return unavailable("listing the runners in etcd", err)
	}
	target, err := runnerNamed(runners, id)
	if err != nil {
		return err
	}
	if err := a.d.Peers.Drain(ctx, target); err != nil {
		return unavailable("draining runner "+id, err)
	}
	writeJSON(w, http.StatusAccepted, drainReply{Runner: id, Draining: true})
	return nil
}
