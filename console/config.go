package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ConfigService reads and changes the cluster's dynamic config document
// with the checks of `tenure config set`: the runner implements it (the
// rules live in package runner, shared with the CLI).
type ConfigService interface {
	// Get returns the stored document and, for every live runner, the
	// layer it gets and the version it runs.
	Get(ctx context.Context) (ConfigView, error)
	// Set applies the change (checked on its own, then against every live
	// runner's settings, then written with a compare-and-swap), waits a
	// little for the reachable runners to read it, and returns the new
	// view. A refusal is an *Error: 400 for a change that is wrong on its
	// own (naming the key), 409 for one a runner would refuse (naming the
	// runner and the key) or a document that kept changing.
	Set(ctx context.Context, c ConfigChange) (ConfigView, error)
}

// ConfigChange is the body of PUT config.
type ConfigChange struct {
	// Set gives keys their values (the dynamic keys only).
	Set map[string]string `json:"set"`
	// Unset removes keys from the layer the change goes to, so that the
	// runners use their own config for them.
	Unset []string `json:"unset"`
	// RolloutPercent is the share of the runners (by rollout bucket) that
	// get the change: below 100 it goes to the canary layer; 100 (the
	// default) makes it, and any canary in progress, everyone's base.
	// Without Set and Unset it moves the canary in progress.
	RolloutPercent *int `json:"rollout_percent"`
	// By names the writer in the document (filled by the API).
	By string `json:"-"`
}

// ConfigView is GET config (and PUT config's answer).
type ConfigView struct {
	Version  int64 `json:"version"`  // the document's (0: none)
	Revision int64 `json:"revision"` // its revision on the coordination backend (0: none)
	// Document is the document as stored (null when there is none).
	Document       json.RawMessage `json:"document"`
	RolloutPercent int             `json:"rollout_percent"`
	// Error says why the stored document is invalid (the runners ignore
	// it and keep their last good config).
	Error   string         `json:"error"`
	Runners []ConfigRunner `json:"runners"`
	// Keys are the settings the document may set.
	Keys []string `json:"keys"`
	// Notes are what the last change could not check (runners that did not
	// answer) or wait for.
	Notes []string `json:"notes,omitempty"`
}

// ConfigRunner is one live runner of a ConfigView.
type ConfigRunner struct {
	ID string `json:"id"`
	// AppliedVersion is the version of the document it runs, as it
	// reports it; null when it did not answer.
	AppliedVersion *int64 `json:"applied_version"`
	Canary         bool   `json:"canary"` // it gets the canary layer
	RolloutBucket  int    `json:"rollout_bucket"`
	// Error says why it refused the latest document it read, or why it
	// did not answer.
	Error     string `json:"error"`
	Reachable bool   `json:"reachable"`
}

func (a *API) configGet(ctx context.Context, w http.ResponseWriter, _ *http.Request) error {
	if a.d.Config == nil {
		return notAvailable("dynamic config")
	}
	v, err := a.d.Config.Get(ctx)
	if err != nil {
		return unavailable("reading the dynamic config", err)
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (a *API) configPut(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	if a.d.Config == nil {
		return notAvailable("dynamic config")
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(b) > maxBody {
		return badRequest("body", "unreadable or over %d bytes", maxBody)
	}
	var c ConfigChange
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return badRequest("body", "want {\"set\": {\"key\": \"value\"}, \"unset\": [\"key\"], \"rollout_percent\": N}: %v", err)
	}
	for k := range c.Set {
		if k == "" {
			return badRequest("set", "an empty key")
		}
	}
	for _, k := range c.Unset {
		if _, dup := c.Set[k]; dup {
			return badRequest("unset", "%s is both set and unset", k)
		}
	}
	if p := c.RolloutPercent; p != nil && (*p < 0 || *p > 100) {
		return badRequest("rollout_percent", "%d: must be a percentage, 0 to 100", *p)
	}
	if len(c.Set) == 0 && len(c.Unset) == 0 && c.RolloutPercent == nil {
		return badRequest("body", "nothing to change: give set, unset and/or rollout_percent")
	}
	c.By = "console@" + a.d.RunnerID
	v, err := a.d.Config.Set(ctx, c)
	if err != nil {
		if _, code := answerOf(err); code == CodeInternal {
			return fmt.Errorf("changing the dynamic config: %w", err)
		}
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}
