package entity

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Operations: an entity type defined with Define is a Go type whose
// exported methods taking a Context first are its operations. A call, a
// send, a task or a reminder names the operation to run (Message.Op,
// task.Task.Op); the host decodes its JSON input into the method's input
// type, runs it in the entity's turn and encodes its output. The type's
// value is its durable state (unless it has none, or Volatile): loaded
// before its first operation, saved after each writing operation that
// changed it. This file holds the definition; operation.go runs it.

// Context is what an operation gets: the handler's context (cancelled as
// any handler's is: detachment, lost shard, the caller's deadline) and the
// entity it runs for.
type Context interface {
	context.Context
	// Type and ID name the entity.
	Type() string
	ID() string
	// Op is the operation running.
	Op() string
	// Now is the current time: the local clock on a runner, the test
	// clock in a test kit.
	Now() time.Time
	// Caller reaches other entities (CallerFrom's).
	Caller() Caller
	// Reminder is the name of the reminder that started the operation, or
	// "" if none did.
	Reminder() string
	// RemindAfter schedules the reminder name of this entity, d from now:
	// the operation op runs with input (encoded as JSON; nil for none)
	// once, as a durable task (see Remind). A pending reminder of the same
	// name is replaced.
	RemindAfter(name string, d time.Duration, op string, input any) error
	// CancelReminder cancels the pending reminders called name.
	CancelReminder(name string) error
}

// Definition is an entity type defined by a Go type's operations (see
// Define). Register it with Host.Define or Types.Define.
type Definition struct {
	name     string
	goType   reflect.Type // the struct type T (not *T)
	newInst  func(id string) reflect.Value
	ops      map[string]*operation // by lower-case name
	names    []string              // operation names as declared, sorted
	def      *operation            // the default operation, nil if none
	durable  bool
	behind   time.Duration
	starter  bool
	stopper  bool
	defErr   error // a definition error, reported by Register
	readOnly []string
	// ro says of every operation, by its name as declared, in lower case
	// and "" for the default, whether it is read-only: Deliver's lookup,
	// without the allocation of a case-folding one.
	ro map[string]bool
}

// operation is one method of a defined type.
type operation struct {
	name     string
	method   reflect.Method
	in       reflect.Type // nil: the method takes no input
	out      reflect.Type // nil: the method returns only an error
	readOnly bool
}

// DefineOption configures a defined type.
type DefineOption func(*defineOptions)

type defineOptions struct {
	readOnly []string
	def      string
	volatile bool
	behind   time.Duration
}

// ReadOnly marks operations that never change the state: they are never
// followed by a save, and on a host the calls and sends of read-only
// operations of one entity share its turn, running concurrently with each
// other, never with a writing operation or with any task of the entity (a
// task, a reminder, even of a read-only operation, takes the turn alone).
// A read-only call finding only readers running joins them if no message
// waits before it and no task is ready. So a read-only operation must be
// safe to run beside others of its kind on the same value: read it, do not
// write it. A read-only operation that changes the state in memory anyway
// has that change dropped at the next writing operation's save or not, so
// do not.
func ReadOnly(ops ...string) DefineOption {
	return func(o *defineOptions) { o.readOnly = append(o.readOnly, ops...) }
}

// Default names the operation that runs a call, send or task that names
// none: POST /v1/entities/{type}/{id}, `tenure call TYPE ID`, Caller.Call
// and a SubmitRequest without Op. Without it, such a message or task is
// refused as bad input.
func Default(op string) DefineOption { return func(o *defineOptions) { o.def = op } }

// Volatile keeps the type's value in memory only: nothing is loaded or
// saved, and the value is lost when the instance is passivated or its
// shard moves. A type whose value has no JSON-visible field is volatile
// anyway.
func Volatile() DefineOption { return func(o *defineOptions) { o.volatile = true } }

// SaveBehind makes the saves after calls and sends coalesce: the state is
// written at most d after the first unsaved change, on passivation and
// before a planned release of the shard (see WriteBehind). A crash or a
// lost shard loses what was not written yet. Saves after tasks are
// unaffected: they are written with the task's completion.
func SaveBehind(d time.Duration) DefineOption { return func(o *defineOptions) { o.behind = d } }

var (
	contextType = reflect.TypeFor[Context]()
	errorType   = reflect.TypeFor[error]()
)

// Define defines the entity type typ by T's operations: every exported
// method of *T of one of the forms
//
//	func (t *T) Op(ctx entity.Context, in In) (Out, error)
//	func (t *T) Op(ctx entity.Context) (Out, error)
//	func (t *T) Op(ctx entity.Context, in In) error
//	func (t *T) Op(ctx entity.Context) error
//
// is an operation named as the method (matched without regard to case);
// In and Out travel as JSON. Other methods are not operations. If *T has
// OnStart(context.Context) error or OnStop(context.Context, StopReason),
// they are called as for any entity (Starter, Stopper).
//
// newT makes the instance of an entity id (nil: a zero T), before its
// stored state, if any, is decoded into it: fields the constructor sets
// and JSON does not see (unexported, or tagged json:"-") are the
// instance's own, such as a logger.
//
// T's JSON-visible fields are the entity's durable state, stored as JSON
// in one S3 object per entity and fenced as State is: loaded when the
// instance is activated, and saved after each writing operation (not
// ReadOnly) that returns without error and changed it — for a task (a
// task or a reminder), written with the task's id before its completion is
// committed, so its effect is exactly once; for a call or send, before the
// reply. A writing operation that returns an error leaves the state as
// last saved: the instance is rebuilt from newT and that state.
//
// An error in the definition (no operations, a method of another form, an
// unknown ReadOnly or Default name) is reported when it is registered.
func Define[T any](typ string, newT func(id string) *T, opts ...DefineOption) *Definition {
	var o defineOptions
	for _, opt := range opts {
		opt(&o)
	}
	gt := reflect.TypeFor[T]()
	d := &Definition{name: typ, goType: gt, behind: o.behind}
	d.newInst = func(id string) reflect.Value {
		if newT != nil {
			if p := newT(id); p != nil {
				return reflect.ValueOf(p)
			}
		}
		return reflect.New(gt)
	}
	d.defErr = d.build(o)
	return d
}

func (d *Definition) build(o defineOptions) error {
	pt := reflect.PointerTo(d.goType)
	d.ops = map[string]*operation{}
	var bad []string
	for i := range pt.NumMethod() {
		m := pt.Method(i)
		ft := m.Type // receiver first
		if ft.NumIn() < 2 || ft.In(1) != contextType {
			continue
		}
		op := &operation{name: m.Name, method: m}
		switch ft.NumIn() {
		case 2:
		case 3:
			op.in = ft.In(2)
		default:
			bad = append(bad, fmt.Sprintf("%s takes %d arguments after its Context, want at most 1", m.Name, ft.NumIn()-2))
			continue
		}
		switch {
		case ft.IsVariadic():
			bad = append(bad, m.Name+" is variadic")
			continue
		case ft.NumOut() == 1 && ft.Out(0) == errorType:
		case ft.NumOut() == 2 && ft.Out(1) == errorType:
			op.out = ft.Out(0)
		default:
			bad = append(bad, m.Name+" must return (Out, error) or error")
			continue
		}
		key := strings.ToLower(m.Name)
		if prev, dup := d.ops[key]; dup {
			bad = append(bad, fmt.Sprintf("%s and %s differ only in case", prev.name, m.Name))
			continue
		}
		d.ops[key] = op
		d.names = append(d.names, m.Name)
	}
	slices.Sort(d.names)
	if len(bad) > 0 {
		return fmt.Errorf("%w: entity type %q (%s): %s", ErrInvalidConfig, d.name, pt, strings.Join(bad, "; "))
	}
	if len(d.ops) == 0 {
		return fmt.Errorf("%w: entity type %q: %s has no operations (exported methods taking an entity.Context first)", ErrInvalidConfig, d.name, pt)
	}
	for _, name := range o.readOnly {
		op, ok := d.ops[strings.ToLower(name)]
		if !ok {
			return fmt.Errorf("%w: entity type %q: ReadOnly(%q): no such operation (have %s)", ErrInvalidConfig, d.name, name, strings.Join(d.names, ", "))
		}
		op.readOnly = true
		d.readOnly = append(d.readOnly, op.name)
	}
	if o.def != "" {
		op, ok := d.ops[strings.ToLower(o.def)]
		if !ok {
			return fmt.Errorf("%w: entity type %q: Default(%q): no such operation (have %s)", ErrInvalidConfig, d.name, o.def, strings.Join(d.names, ", "))
		}
		d.def = op
	}
	if o.behind < 0 {
		return fmt.Errorf("%w: entity type %q: SaveBehind(%s): must not be negative", ErrInvalidConfig, d.name, o.behind)
	}
	d.ro = map[string]bool{}
	for key, op := range d.ops {
		d.ro[key], d.ro[op.name] = op.readOnly, op.readOnly
	}
	if d.def != nil {
		d.ro[""] = d.def.readOnly
	}
	d.durable = !o.volatile && hasJSONFields(d.goType)
	d.starter = pt.Implements(reflect.TypeFor[Starter]())
	d.stopper = pt.Implements(reflect.TypeFor[Stopper]())
	return nil
}

// hasJSONFields reports whether encoding/json writes anything of a t: a
// non-struct does; a struct does if it has an exported field not tagged
// json:"-" (or an embedded struct that has one).
func hasJSONFields(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return true
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Tag.Get("json") == "-" {
			continue
		}
		if f.Anonymous {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && hasJSONFields(ft) {
				return true
			}
			if ft.Kind() != reflect.Struct && f.IsExported() {
				return true
			}
			continue
		}
		if f.IsExported() {
			return true
		}
	}
	return false
}

// Name is the entity type's name.
func (d *Definition) Name() string { return d.name }

// Ops lists the operations' names, sorted.
func (d *Definition) Ops() []string { return slices.Clone(d.names) }

// HasOp reports whether op names an operation of the type (without
// regard to case; "" names the default, if the type has one).
func (d *Definition) HasOp(op string) bool {
	_, ok := d.lookup(op)
	return ok
}

// IsReadOnly reports whether op is a read-only operation of the type.
func (d *Definition) IsReadOnly(op string) bool {
	o, ok := d.lookup(op)
	return ok && o.readOnly
}

// readOnlyOp is IsReadOnly without allocating for a name spelled as
// declared or in lower case.
func (d *Definition) readOnlyOp(op string) bool {
	if ro, ok := d.ro[op]; ok {
		return ro
	}
	return d.IsReadOnly(op)
}

// Durable reports whether the type keeps durable state.
func (d *Definition) Durable() bool { return d.durable }

// Err is the definition's error, nil if it is valid.
func (d *Definition) Err() error { return d.defErr }

// lookup finds an operation by name ("" is the default).
func (d *Definition) lookup(name string) (*operation, bool) {
	if name == "" {
		return d.def, d.def != nil
	}
	op, ok := d.ops[strings.ToLower(name)]
	return op, ok
}

// ErrUnknownOp is matched by every *UnknownOpError.
var ErrUnknownOp = errors.New("entity: unknown operation")

// UnknownOpError reports a call or task naming an operation its type does
// not have (or naming none, for a type without a Default). It matches
// ErrBadInput too: the request is wrong, and the handler did not run.
type UnknownOpError struct {
	Type string   // the entity type
	Op   string   // the operation asked for, "" for none
	Ops  []string // the type's operations
}

// Error names the type, the operation and the ones it has.
func (e *UnknownOpError) Error() string {
	if e.Op == "" {
		return fmt.Sprintf("entity: type %q has no default operation: name one of %s", e.Type, strings.Join(e.Ops, ", "))
	}
	return fmt.Sprintf("entity: type %q has no operation %q (have %s)", e.Type, e.Op, strings.Join(e.Ops, ", "))
}

// Is matches ErrUnknownOp and ErrBadInput.
func (e *UnknownOpError) Is(target error) bool {
	return target == ErrUnknownOp || target == ErrBadInput
}
