package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Envelope is the stored form of one entity's state.
type Envelope struct {
	Type  string `json:"type"`
	ID    string `json:"id"`
	Shard string `json:"shard"` // group/index
	// Epoch is the shard lock epoch of the ownership that wrote it: the
	// fence every later write is checked against.
	Epoch int64 `json:"epoch"`
	// Rev grows by one with every write, so every body differs and the
	// ETag changes even when the state does not.
	Rev      int64     `json:"rev"`
	RunnerID string    `json:"runner_id"`
	SavedAt  time.Time `json:"saved_at"`
	// State is the user's state as JSON; null (or empty) means none.
	State json.RawMessage `json:"state"`
	// Applied lists the last tasks whose effect State contains, oldest
	// first, so that a task retried after its state was written but before
	// its completion was committed is completed with its recorded result
	// instead of running twice.
	Applied []Applied `json:"applied,omitempty"`
}

// Applied is one task whose effect the state contains.
type Applied struct {
	Task   string          `json:"task"`
	Result json.RawMessage `json:"result,omitempty"`
}

// HasState reports whether the envelope holds a state (not null).
func (e *Envelope) HasState() bool {
	s := bytes.TrimSpace(e.State)
	return len(s) > 0 && !bytes.Equal(s, []byte("null"))
}

// AppliedResult returns the recorded result of task id, if its effect is
// in the state.
func (e *Envelope) AppliedResult(id string) (json.RawMessage, bool) {
	for _, a := range e.Applied {
		if a.Task == id {
			return a.Result, true
		}
	}
	return nil, false
}

// Record notes that the state now contains task id's effect, keeping the
// last keep records.
func (e *Envelope) Record(id string, result json.RawMessage, keep int) {
	e.Applied = append(slices.DeleteFunc(e.Applied, func(a Applied) bool { return a.Task == id }),
		Applied{Task: id, Result: result})
	if keep > 0 && len(e.Applied) > keep {
		e.Applied = slices.Clone(e.Applied[len(e.Applied)-keep:])
	}
}

// Clone returns a deep copy.
func (e *Envelope) Clone() *Envelope {
	c := *e
	c.State = slices.Clone(e.State)
	c.Applied = slices.Clone(e.Applied)
	return &c
}

// decode parses a stored body and checks that it names the entity of its
// key.
func decode(key, typ, id string, body []byte) (*Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, &CorruptError{Key: key, Err: err}
	}
	if env.Type != typ || env.ID != id {
		return nil, &CorruptError{Key: key, Err: fmt.Errorf("it names entity %s/%q, not %s/%q", env.Type, env.ID, typ, id)}
	}
	if env.Epoch <= 0 || env.Rev <= 0 {
		return nil, &CorruptError{Key: key, Err: errors.New("epoch and rev must be positive")}
	}
	if len(env.State) > 0 && !json.Valid(env.State) {
		return nil, &CorruptError{Key: key, Err: errors.New("state is not JSON")}
	}
	return &env, nil
}
