package entity

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/tenurehq/tenure/entity/task"
)

// Instance is one entity of a defined type: its value and the state last
// saved. A host makes one per resident entity; a test kit may run one
// directly. It runs one operation at a time (read-only ones aside): it is
// not safe for concurrent writing operations.
type Instance struct {
	d  *Definition
	id string
	v  reflect.Value // *T
	// saved is the state as last loaded or saved, nil when none is stored
	// (durable types only).
	saved json.RawMessage
	// base is what a writing operation's state is compared with: saved,
	// or, when none is stored, the constructor's value, so that an
	// operation that changes nothing saves nothing, first one included.
	base json.RawMessage
}

// NewInstance makes the instance of entity id with its stored state
// (nil: none stored, the constructor's value stands).
func (d *Definition) NewInstance(id string, stored json.RawMessage) (*Instance, error) {
	if d.defErr != nil {
		return nil, d.defErr
	}
	i := &Instance{d: d, id: id}
	if err := i.load(stored); err != nil {
		return nil, err
	}
	return i, nil
}

// load rebuilds the value from the constructor and stored.
func (i *Instance) load(stored json.RawMessage) error {
	v := i.d.newInst(i.id)
	if i.d.durable && len(stored) > 0 && !bytes.Equal(stored, []byte("null")) {
		if err := json.Unmarshal(stored, v.Interface()); err != nil {
			return fmt.Errorf("entity %s/%s: stored state does not decode into %s: %w", i.d.name, i.id, i.d.goType, err)
		}
	}
	i.v, i.saved, i.base = v, stored, stored
	if i.d.durable && (len(stored) == 0 || bytes.Equal(stored, []byte("null"))) {
		i.base, _ = json.Marshal(v.Interface()) // nil if it does not encode: the first change saves
	}
	return nil
}

// Value is the instance's *T.
func (i *Instance) Value() any { return i.v.Interface() }

// State is the state as last loaded or saved (nil when none is stored).
func (i *Instance) State() json.RawMessage { return i.saved }

// Run runs the operation op (the default if "") with input (JSON; empty
// is the input type's zero value) and returns its output as JSON (nil for
// an operation without one). For a writing operation of a durable type
// that returns without error and changed the state, save is called with
// the new state (its JSON) before Run returns; save's error is Run's. A
// writing operation that fails, or whose save fails, leaves the instance
// rebuilt from its constructor and the state last saved.
func (i *Instance) Run(ctx Context, op string, input []byte, save func(json.RawMessage) error) ([]byte, error) {
	o, ok := i.d.lookup(op)
	if !ok {
		return nil, Permanent(&UnknownOpError{Type: i.d.name, Op: op, Ops: i.d.names})
	}
	args := []reflect.Value{i.v, reflect.ValueOf(ctx)}
	if o.in != nil {
		in := reflect.New(o.in)
		if len(input) > 0 {
			if err := json.Unmarshal(input, in.Interface()); err != nil {
				return nil, Permanent(fmt.Errorf("entity %s/%s: operation %s: %w: input does not decode into %s: %w",
					i.d.name, i.id, o.name, ErrBadInput, o.in, err))
			}
		}
		args = append(args, in.Elem())
	}
	res := o.method.Func.Call(args)
	if e := res[len(res)-1]; !e.IsNil() {
		err := e.Interface().(error)
		if !o.readOnly && i.d.durable {
			_ = i.load(i.saved) // it decoded before
		}
		return nil, err
	}
	var out []byte
	if o.out != nil {
		b, err := json.Marshal(res[0].Interface())
		if err != nil {
			return nil, Permanent(fmt.Errorf("entity %s/%s: operation %s: output %s does not encode as JSON: %w", i.d.name, i.id, o.name, o.out, err))
		}
		out = b
	}
	if o.readOnly || !i.d.durable {
		return out, nil
	}
	raw, err := json.Marshal(i.v.Interface())
	if err != nil {
		_ = i.load(i.saved)
		return nil, Permanent(fmt.Errorf("entity %s/%s: operation %s: state %s does not encode as JSON: %w", i.d.name, i.id, o.name, i.d.goType, err))
	}
	if bytes.Equal(raw, i.base) {
		return out, nil
	}
	if err := save(raw); err != nil {
		_ = i.load(i.saved)
		return nil, err
	}
	i.saved, i.base = raw, raw
	return out, nil
}

// Start calls the value's OnStart, if it has one.
func (i *Instance) Start(ctx context.Context) error {
	if s, ok := i.v.Interface().(Starter); ok {
		return s.OnStart(ctx)
	}
	return nil
}

// Stop calls the value's OnStop, if it has one.
func (i *Instance) Stop(ctx context.Context, reason StopReason) {
	if s, ok := i.v.Interface().(Stopper); ok {
		s.OnStop(ctx, reason)
	}
}

// opFactory is the Factory of a defined type: a binder that loads the
// state first for a durable type, the instance itself for another.
func (d *Definition) factory() Factory {
	return func(id string) (Entity, error) {
		if d.durable {
			return &opBinder{d: d, id: id}, nil
		}
		inst, err := d.NewInstance(id, nil)
		if err != nil {
			return nil, err
		}
		return &opEntity{inst: inst}, nil
	}
}

// opBinder waits for the host to load a durable type's state.
type opBinder struct {
	d  *Definition
	id string
}

func (b *opBinder) Handle(context.Context, *task.Task) (json.RawMessage, error) {
	return nil, Permanent(errStateNoEntity)
}

func (b *opBinder) options() stateOptions { return stateOptions{writeBehind: b.d.behind} }

func (b *opBinder) bind(c *stateCore) (Entity, error) {
	inst, err := b.d.NewInstance(b.id, c.loaded())
	if err != nil {
		return nil, err
	}
	return &opEntity{inst: inst, core: c}, nil
}

// opEntity runs a defined type's operations as an entity: tasks in
// Handle, messages in Receive.
type opEntity struct {
	inst *Instance
	core *stateCore // nil for a volatile type
}

func (e *opEntity) Handle(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	oc := &opContext{Context: ctx, d: e.inst.d, typ: e.inst.d.name, id: t.Entity, op: t.Op}
	return e.inst.Run(oc, t.Op, t.Input, e.save(ctx))
}

func (e *opEntity) Receive(ctx context.Context, m *Message) ([]byte, error) {
	oc := &opContext{Context: ctx, d: e.inst.d, typ: m.Type, id: m.ID, op: m.Op}
	return e.inst.Run(oc, m.Op, m.Body, e.save(ctx))
}

func (e *opEntity) save(ctx context.Context) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		if e.core == nil {
			return nil
		}
		return e.core.save(ctx, raw)
	}
}

func (e *opEntity) OnStart(ctx context.Context) error { return e.inst.Start(ctx) }

func (e *opEntity) OnStop(ctx context.Context, reason StopReason) { e.inst.Stop(ctx, reason) }

// opContext is Context on a host.
type opContext struct {
	context.Context
	d           *Definition
	typ, id, op string
}

func (c *opContext) Type() string   { return c.typ }
func (c *opContext) ID() string     { return c.id }
func (c *opContext) Op() string     { return c.op }
func (c *opContext) Now() time.Time { return time.Now() }
func (c *opContext) Caller() Caller { return CallerFrom(c.Context) }
func (c *opContext) Reminder() string {
	name, _ := ReminderFrom(c.Context)
	return name
}

func (c *opContext) RemindAfter(name string, d time.Duration, op string, input any) error {
	if !c.d.HasOp(op) {
		return &UnknownOpError{Type: c.typ, Op: op, Ops: c.d.names}
	}
	return remindAfter(c.Context, name, d, op, input)
}

func (c *opContext) CancelReminder(name string) error { return CancelReminder(c.Context, name) }
