package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/storage"
)

// entityView is GET entities/{type}/{id}.
type entityView struct {
	Type  string `json:"type"`
	ID    string `json:"id"`
	Group string `json:"group"`
	Shard string `json:"shard"`
	// Runner holds the entity's shard ("" when unowned).
	Runner string `json:"runner"`
	// Resident says whether the entity is in memory on Runner (null when
	// that runner did not say).
	Resident *bool `json:"resident"`
	// State is the durable state as stored (null when there is none, or it
	// could not be read: StateError says why).
	State          *entityState             `json:"state"`
	StateError     string                   `json:"state_error"`
	Reminders      []entity.PendingReminder `json:"reminders"`
	RemindersError string                   `json:"reminders_error,omitempty"`
	// Operations are the type's operations as the serving runner knows
	// them (null when it does not host the type, or the type has none).
	Operations []string `json:"operations"`
}

// entityState is an entity's stored state.
type entityState struct {
	JSON    json.RawMessage `json:"json"` // the state (null for none saved)
	Rev     int64           `json:"rev"`
	Epoch   int64           `json:"epoch"` // of the ownership that wrote it
	Size    int             `json:"size"`  // bytes of the state's JSON
	SavedAt string          `json:"saved_at"`
	Writer  string          `json:"writer"` // the runner that wrote it
}

// entityParams reads and checks {type} and {id}.
func entityParams(r *http.Request) (typ, id string, err error) {
	typ, id = r.PathValue("type"), r.PathValue("id")
	if err := task.ValidateType(typ); err != nil {
		return "", "", badRequest("type", "%v", err)
	}
	if id == "" {
		return "", "", badRequest("id", "must not be empty: state and calls belong to an entity")
	}
	if err := task.ValidateEntity(id); err != nil {
		return "", "", badRequest("id", "%v", err)
	}
	return typ, id, nil
}

// locate places entity (typ, id) of the request's group on its shard, and
// finds the shard's holder.
func (a *API) locate(ctx context.Context, r *http.Request, typ, id string) (g string, sh storage.ShardID, holder storage.RunnerInfo, err error) {
	meta, err := a.meta(ctx)
	if err != nil {
		return "", sh, holder, err
	}
	if g, err = group(meta, "group", r.URL.Query().Get("group")); err != nil {
		return "", sh, holder, err
	}
	sh = task.ShardOf(g, meta.Shards, typ, id, "")
	locks, _, err := a.d.Store.ShardLocks(ctx)
	if err != nil && len(locks) == 0 {
		return "", sh, holder, unavailable("listing the shard locks in etcd", err)
	}
	for _, l := range locks {
		if l.Shard == sh {
			holder.ID = l.RunnerID
		}
	}
	if holder.ID != "" {
		runners, _, _ := a.d.Store.Runners(ctx)
		for _, rn := range runners {
			if rn.ID == holder.ID {
				holder = rn
			}
		}
	}
	return g, sh, holder, nil
}

func (a *API) entityGet(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	typ, id, err := entityParams(r)
	if err != nil {
		return err
	}
	if a.d.States == nil {
		return notAvailable("entity state")
	}
	g, sh, holder, err := a.locate(ctx, r, typ, id)
	if err != nil {
		return err
	}
	v := entityView{Type: typ, ID: id, Group: g, Shard: sh.String(), Runner: holder.ID, Reminders: []entity.PendingReminder{}}
	if a.d.Operations != nil {
		v.Operations = a.d.Operations(typ)
	}
	env, _, err := a.d.States.Get(ctx, sh, typ, id)
	switch {
	case errors.Is(err, state.ErrNotFound):
	case err != nil:
		v.StateError = err.Error()
	default:
		st := &entityState{JSON: env.State, Rev: env.Rev, Epoch: env.Epoch, Size: len(env.State), SavedAt: utc(env.SavedAt), Writer: env.RunnerID}
		if !env.HasState() {
			st.JSON = json.RawMessage("null")
		}
		v.State = st
	}
	if a.d.Reminders != nil {
		if rs, err := a.d.Reminders(ctx, sh, typ, id); err != nil {
			v.RemindersError = err.Error()
		} else if rs != nil {
			v.Reminders = rs
		}
	}
	if holder.Addr != "" {
		if rr, err := a.d.Peers.Resident(ctx, holder, sh); err == nil && rr.Owned {
			in := false
			for _, e := range rr.Resident {
				if e.Type == typ && e.ID == id {
					in = true
				}
			}
			// A truncated listing that lacks it does not say it is absent.
			if in || !rr.Truncated {
				v.Resident = &in
			}
		}
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// callReply is POST entities/{type}/{id}[/{op}].
type callReply struct {
	Output json.RawMessage `json:"output"`
	// Runner held the entity's shard when the call was made (the call
	// goes wherever the shard is when it arrives).
	Runner string  `json:"runner"`
	TookMS float64 `json:"took_ms"`
}

// entityCall calls an entity's operation with the body as its JSON input.
// A failed call is answered as the runners' HTTP entity endpoint answers
// it: its status, and {"error", "code", "applied"}.
func (a *API) entityCall(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	typ, id, err := entityParams(r)
	if err != nil {
		return err
	}
	op := r.PathValue("op")
	if err := task.ValidateOp(op); err != nil {
		return badRequest("op", "%v", err)
	}
	if a.d.Call == nil {
		return notAvailable("entity calls")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case err != nil:
		return badRequest("body", "reading it: %v", err)
	case len(body) > maxBody:
		return NewError(http.StatusRequestEntityTooLarge, CodeBadRequest, fmt.Errorf("body: over %d bytes", maxBody))
	case len(body) > 0 && !json.Valid(body):
		return badRequest("body", "%d bytes that are not JSON: the body is the operation's JSON input", len(body))
	}
	_, _, holder, err := a.locate(ctx, r, typ, id)
	if err != nil {
		return err
	}
	start := time.Now()
	out, err := a.d.Call(ctx, &entity.Message{Type: typ, ID: id, Op: op, Body: body})
	took := time.Since(start)
	if err != nil {
		messaging.WriteError(w, err)
		return nil
	}
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	if !json.Valid(out) {
		// A reply that is not JSON is shown as a string.
		s, _ := json.Marshal(string(out))
		out = s
	}
	writeJSON(w, http.StatusOK, callReply{Output: out, Runner: holder.ID, TookMS: float64(took.Microseconds()) / 1000})
	return nil
}
