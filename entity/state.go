package entity

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
)

// Errors of durable state; they are the state package's sentinels, so
// errors.Is matches either name.
var (
	// ErrStateFenced: a save was refused because a newer ownership of the
	// shard (or an operator's delete) wrote the state since this instance
	// read it. The instance is discarded; the error reaches the handler.
	ErrStateFenced = state.ErrFenced
	// ErrStateTooLarge: the encoded state exceeds Config.MaxStateSize;
	// nothing was written.
	ErrStateTooLarge = state.ErrTooLarge
	// ErrStateCorrupt: the stored state does not decode; the entity is not
	// activated until an operator repairs it (tenure entity state get|delete).
	ErrStateCorrupt = state.ErrCorrupt
)

// State is an entity's durable state: an S of the instance's own, loaded
// from S3 when the instance is activated (before its factory runs) and
// written back by Save. The host fences every write with the shard lock
// epoch of the ownership that activated the instance, so a runner that lost
// the shard can never overwrite its successor's state: its Save fails with
// ErrStateFenced.
//
// What is durable when a handler returns:
//   - a task's handler: Save stages the state; the host writes it when the
//     handler returns successfully, in one conditional PUT that also
//     records the task's id and result, before the task's completion is
//     committed. A handler that fails or panics drops what it staged and
//     its instance is discarded (the next turn reloads from S3). A task
//     retried after its state was written but before its completion was
//     committed (a crash in between) is completed with the recorded result
//     without running again: the task's effect on the state is exactly
//     once.
//   - a call, send or hook without WriteBehind: durable when Save returns
//     nil (one conditional PUT).
//   - with WriteBehind(d): Save marks the state dirty; it is written at
//     most d later, coalescing the saves in between, when the instance is
//     passivated, and before a planned release of the shard lets the lock
//     go. A crash or a lost shard loses what was not written yet.
//
// A State belongs to its instance, which runs one handler at a time: it is
// not safe for use by other goroutines.
type State[S any] struct {
	v    S
	core *stateCore
}

// Get returns the state in memory; changes to it are saved by Save.
func (s *State[S]) Get() *S { return &s.v }

// Set replaces the state in memory; Save makes it durable.
func (s *State[S]) Set(v S) { s.v = v }

// Save makes the state in memory durable, as the State doc says for the
// kind of handler calling it. An ErrStateFenced discards the instance.
func (s *State[S]) Save(ctx context.Context) error {
	raw, err := json.Marshal(s.v)
	if err != nil {
		return fmt.Errorf("entity %s/%s: state %s does not encode as JSON: %w", s.core.typ, s.core.id, reflect.TypeFor[S](), err)
	}
	return s.core.save(ctx, raw)
}

// Clear resets the state to S's zero value and stores "no state" (null),
// durable as a Save is. The object stays, holding the fence: it is never
// deleted unconditionally, which a stale owner could otherwise undo.
func (s *State[S]) Clear(ctx context.Context) error {
	var zero S
	s.v = zero
	return s.core.save(ctx, json.RawMessage("null"))
}

// Rev is the revision of the stored version this instance last read or
// wrote; it grows with every write.
func (s *State[S]) Rev() int64 { return s.core.rev() }

// StateOption configures a stateful entity type.
type StateOption func(*stateOptions)

type stateOptions struct {
	writeBehind time.Duration
}

// WriteBehind makes Save outside tasks coalesce: the state is written at
// most d after the first unsaved Save, on passivation and before a planned
// release. Saves in tasks are unaffected (they are written when the task's
// handler returns).
func WriteBehind(d time.Duration) StateOption {
	return func(o *stateOptions) { o.writeBehind = d }
}

// Stateful registers an entity type with durable state S: f creates the
// instance of an entity id with its loaded state, after the host has
// loaded and fenced it. An instance may implement Starter, Stopper and
// Receiver as any entity.
func Stateful[S any](f func(id string, st *State[S]) (Entity, error), opts ...StateOption) Factory {
	if f == nil {
		return nil // refused by Register, like any nil factory
	}
	var o stateOptions
	for _, opt := range opts {
		opt(&o)
	}
	return func(id string) (Entity, error) {
		return &stateBinder[S]{id: id, f: f, opts: o}, nil
	}
}

// StatefulHandler is Stateful for a typed handler, adapted as Typed does.
func StatefulHandler[S, In, Out any](f func(id string, st *State[S]) (Handler[In, Out], error), opts ...StateOption) Factory {
	if f == nil {
		return nil
	}
	return Stateful(func(id string, st *State[S]) (Entity, error) {
		h, err := f(id, st)
		if err != nil {
			return nil, err
		}
		return &typedEntity[In, Out]{h: h}, nil
	}, opts...)
}

// binder is what a stateful factory makes: the host loads the state, then
// bind decodes it and creates the real instance.
type binder interface {
	Entity
	options() stateOptions
	bind(c *stateCore) (Entity, error)
}

type stateBinder[S any] struct {
	id   string
	f    func(id string, st *State[S]) (Entity, error)
	opts stateOptions
}

// Handle is reached only by a task that names no entity: state needs one.
func (b *stateBinder[S]) Handle(context.Context, *task.Task) (json.RawMessage, error) {
	return nil, Permanent(errStateNoEntity)
}

func (b *stateBinder[S]) options() stateOptions { return b.opts }

func (b *stateBinder[S]) bind(c *stateCore) (Entity, error) {
	st := &State[S]{core: c}
	if raw := c.loaded(); raw != nil {
		if err := json.Unmarshal(raw, &st.v); err != nil {
			return nil, &state.CorruptError{Key: c.key, Err: fmt.Errorf("state does not decode into %s: %w", reflect.TypeFor[S](), err)}
		}
	}
	var ent Entity
	err := safeHook(func() error {
		var ferr error
		ent, ferr = b.f(b.id, st)
		return ferr
	})
	if err == nil && ent == nil {
		err = fmt.Errorf("factory returned no entity")
	}
	return ent, err
}
