package tenuretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
)

// ErrCallCycle is matched by the error of a call from an operation to an
// entity whose operation is already waiting on that call, directly or
// through others (A calls B, B calls A). On a runner such a call waits for
// the entity's turn until the caller's deadline; a Unit fails it at once.
var ErrCallCycle = errors.New("tenuretest: call cycle")

// start is where a Unit's clock starts: a fixed time, so that what a test
// sees of the clock is the same on every run.
var start = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// Unit runs entity types made with entity.Define in memory, as a runner's
// host runs them, with a fake clock and no storage: the state a runner
// would write to S3 is kept in the Unit, where the test reads it. See the
// package documentation. Its methods are safe for concurrent use;
// operations of one entity run one at a time, in the order they take its
// turn (read-only ones too, which a runner may run side by side). Every
// change is saved at once: entity.SaveBehind's coalescing is not modelled.
type Unit struct {
	tb    testing.TB
	types map[string]*entity.Definition
	names []string // the types, sorted

	mu       sync.Mutex
	now      time.Time
	ents     map[entKey]*unitEntity
	rems     []*pending // reminders not fired yet, in no order
	remSeq   uint64
	outbox   []outgoing // sends not delivered yet
	sendErrs []error
}

// entKey names an entity.
type entKey struct{ typ, id string }

func (k entKey) String() string { return k.typ + "/" + k.id }

// unitEntity is one entity of a Unit: its instance while active, and its
// state as a runner would have stored it.
type unitEntity struct {
	key  entKey
	d    *entity.Definition
	turn chan struct{} // holds a token while an operation (or a passivation) runs
	inst *entity.Instance

	// Under Unit.mu.
	saved json.RawMessage // nil: none stored
	saves int
}

// outgoing is a send waiting for delivery.
type outgoing struct {
	m entity.Message
}

// New returns a Unit running the given types. A definition error or a
// type registered twice fails tb at once, as runner.New would fail. At
// tb's cleanup the active instances are stopped (OnStop with
// entity.StopShardReleased).
func New(tb testing.TB, defs ...*entity.Definition) *Unit {
	tb.Helper()
	u := &Unit{tb: tb, types: map[string]*entity.Definition{}, now: start, ents: map[entKey]*unitEntity{}}
	var reg entity.Types // the runner's checks: names, duplicates, definition errors
	for i, d := range defs {
		if d == nil {
			tb.Fatalf("tenuretest.New: definition %d is nil", i)
		}
		if err := reg.Define(d); err != nil {
			tb.Fatalf("tenuretest.New: %v", err)
		}
		u.types[d.Name()] = d
	}
	u.names = reg.Names()
	tb.Cleanup(u.stopAll)
	return u
}

// Now is the Unit's clock: 2030-01-01T00:00:00Z when the Unit is made,
// moved only by Advance. Operations read it through Context.Now.
func (u *Unit) Now() time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.now
}

// Do runs the operation op (the type's default if "") of the entity
// (typ, id) as a call, with in encoded as JSON (nil: no input), and
// returns its output as JSON (nil for an operation without one). The
// sends it makes, and those they make, are delivered before Do returns.
func (u *Unit) Do(typ, id, op string, in any) (json.RawMessage, error) {
	body, err := encode(in)
	if err != nil {
		return nil, fmt.Errorf("tenuretest: call %s/%s %s: input does not encode as JSON: %w", typ, id, op, err)
	}
	return u.Invoke(context.Background(), &entity.Message{Type: typ, ID: id, Op: op, Body: body})
}

// Call runs the operation op of the entity (typ, id) with in encoded as
// JSON, and decodes its output into an Out: entity.Call against u.
func Call[Out any](u *Unit, typ, id, op string, in any) (Out, error) {
	return entity.Call[Out](context.Background(), u, typ, id, op, in)
}

// Task runs the operation op of the entity (typ, id) as a durable task
// would run it, with in encoded as JSON (nil: no input), and returns its
// result. The state rules are a call's; a failing task is not retried
// (on a runner it would be, up to its attempts): its error is returned.
func (u *Unit) Task(typ, id, op string, in any) (json.RawMessage, error) {
	body, err := encode(in)
	if err != nil {
		return nil, fmt.Errorf("tenuretest: task %s/%s %s: input does not encode as JSON: %w", typ, id, op, err)
	}
	out, err := u.run(context.Background(), nil, entKey{typ, id}, op, body, "")
	u.flush()
	return out, err
}

// Call delivers body to the default operation of the entity (typ, id) and
// returns its reply (entity.Caller).
func (u *Unit) Call(ctx context.Context, typ, id string, body []byte) ([]byte, error) {
	return u.Invoke(ctx, &entity.Message{Type: typ, ID: id, Body: body})
}

// Send delivers body to the default operation of the entity (typ, id)
// without its reply (entity.Caller); see Invoke.
func (u *Unit) Send(ctx context.Context, typ, id string, body []byte) error {
	_, err := u.Invoke(ctx, &entity.Message{Type: typ, ID: id, Body: body, OneWay: true})
	return err
}

// Invoke runs m's operation and returns its reply (entity.Caller). A send
// (m.OneWay) is queued, as a runner accepts it, and returns nil; the queue
// is delivered in order once the test's own call returns (at once for a
// send from the test itself), and the error of a send's operation, which
// a runner logs, is logged on the test and kept for SendErrors. A type
// that is not registered is an error matching entity.ErrNoHandler.
func (u *Unit) Invoke(ctx context.Context, m *entity.Message) ([]byte, error) {
	return u.invoke(ctx, chainFrom(ctx), m)
}

func (u *Unit) invoke(ctx context.Context, chain []entKey, m *entity.Message) ([]byte, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if m == nil {
		return nil, fmt.Errorf("tenuretest: %w: nil message", entity.ErrBadInput)
	}
	k := entKey{m.Type, m.ID}
	if m.OneWay {
		if _, err := u.lookup(k); err != nil {
			return nil, err
		}
		u.mu.Lock()
		u.outbox = append(u.outbox, outgoing{m: *m})
		u.mu.Unlock()
		if len(chain) == 0 {
			u.flush()
		}
		return nil, nil
	}
	out, err := u.run(ctx, chain, k, m.Op, m.Body, "")
	if len(chain) == 0 {
		u.flush()
	}
	return out, err
}

// SendErrors returns the errors of the sends delivered so far whose
// operation failed, in delivery order.
func (u *Unit) SendErrors() []error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.sendErrs)
}

// flush delivers the queued sends, and those they queue, in order.
func (u *Unit) flush() {
	for {
		u.mu.Lock()
		if len(u.outbox) == 0 {
			u.mu.Unlock()
			return
		}
		o := u.outbox[0]
		u.outbox = u.outbox[1:]
		u.mu.Unlock()
		// A send runs in the entity's own turn, not its sender's: it starts
		// a chain of its own.
		if _, err := u.run(context.Background(), nil, entKey{o.m.Type, o.m.ID}, o.m.Op, o.m.Body, ""); err != nil {
			err = fmt.Errorf("tenuretest: send to %s/%s %s: %w", o.m.Type, o.m.ID, o.m.Op, err)
			u.tb.Logf("%v", err)
			u.mu.Lock()
			u.sendErrs = append(u.sendErrs, err)
			u.mu.Unlock()
		}
	}
}

// lookup returns the definition of k's type, or an error naming the
// registered ones.
func (u *Unit) lookup(k entKey) (*entity.Definition, error) {
	d, ok := u.types[k.typ]
	if !ok {
		return nil, fmt.Errorf("tenuretest: %w: %q (registered: %s)", entity.ErrNoHandler, k.typ, strings.Join(u.names, ", "))
	}
	if k.id == "" {
		return nil, fmt.Errorf("tenuretest: %w: entity of type %q with an empty id", entity.ErrBadInput, k.typ)
	}
	return d, nil
}

// entity returns the entity k, made on first use.
func (u *Unit) entity(k entKey, d *entity.Definition) *unitEntity {
	u.mu.Lock()
	defer u.mu.Unlock()
	e, ok := u.ents[k]
	if !ok {
		e = &unitEntity{key: k, d: d, turn: make(chan struct{}, 1)}
		u.ents[k] = e
	}
	return e
}

// run runs the operation op of k in its turn: activating the entity
// first, then through entity.Instance.Run, saving into the Unit.
// reminder names the reminder that runs it, if one does.
func (u *Unit) run(ctx context.Context, chain []entKey, k entKey, op string, input []byte, reminder string) ([]byte, error) {
	d, err := u.lookup(k)
	if err != nil {
		return nil, err
	}
	if slices.Contains(chain, k) {
		path := make([]string, 0, len(chain)+1)
		for _, c := range chain {
			path = append(path, c.String())
		}
		return nil, fmt.Errorf("%w: %s → %s: %s would wait for its own turn", ErrCallCycle, strings.Join(path, " → "), k, k)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tenuretest: %s %s: %w: %w", k, op, entity.ErrNotStarted, err)
	}
	e := u.entity(k, d)
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("tenuretest: %s %s: %w: waiting for the entity's turn: %w", k, op, entity.ErrNotStarted, ctx.Err())
	}
	defer func() { <-e.turn }()
	if e.inst == nil {
		if err := u.activate(ctx, e); err != nil {
			return nil, fmt.Errorf("tenuretest: %s %s: %w: activating the entity: %w", k, op, entity.ErrNotStarted, err)
		}
	}
	chain = append(slices.Clip(chain), k)
	oc := &opContext{u: u, key: k, op: op, reminder: reminder, caller: &unitCaller{u: u, chain: chain}}
	oc.Context = entity.ContextWithCaller(context.WithValue(ctx, chainKey{}, chain), oc.caller)
	out, err := runSafe(e.inst, oc, op, input, func(raw json.RawMessage) error {
		u.mu.Lock()
		e.saved = slices.Clone(raw)
		e.saves++
		u.mu.Unlock()
		return nil
	})
	var pe *entity.PanicError
	if errors.As(err, &pe) {
		// Its value may be half changed: a runner discards it.
		inst := e.inst
		e.inst = nil
		stopSafe(inst, entity.StopFailed)
	}
	return out, err
}

// activate makes e's instance from its stored state and runs its OnStart.
func (u *Unit) activate(ctx context.Context, e *unitEntity) error {
	u.mu.Lock()
	stored := slices.Clone(e.saved)
	u.mu.Unlock()
	inst, err := e.d.NewInstance(e.key.id, stored)
	if err != nil {
		return err
	}
	if err := startSafe(ctx, inst); err != nil {
		return fmt.Errorf("OnStart: %w", err)
	}
	e.inst = inst
	return nil
}

// runSafe is inst.Run with a panic turned into an *entity.PanicError, as
// a runner turns it.
func runSafe(inst *entity.Instance, ctx entity.Context, op string, input []byte, save func(json.RawMessage) error) (out []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = nil, &entity.PanicError{Value: v, Stack: string(debug.Stack())}
		}
	}()
	return inst.Run(ctx, op, input, save)
}

func startSafe(ctx context.Context, inst *entity.Instance) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &entity.PanicError{Value: v, Stack: string(debug.Stack())}
		}
	}()
	return inst.Start(ctx)
}

// stopSafe runs inst's OnStop; a panic in it is dropped, as a runner
// drops it (the instance is gone either way).
func stopSafe(inst *entity.Instance, reason entity.StopReason) {
	defer func() { _ = recover() }()
	inst.Stop(context.Background(), reason)
}

// Passivate stops the entity's instance, if it is active, as a runner
// does after its idle time (OnStop with entity.StopIdle), once the
// operation running, if any, has returned. The next operation activates
// it again from its saved state: what Passivate loses is what a runner
// would lose. Its reminders stay.
func (u *Unit) Passivate(typ, id string) {
	u.stop(entKey{typ, id}, entity.StopIdle)
}

func (u *Unit) stop(k entKey, reason entity.StopReason) {
	u.mu.Lock()
	e := u.ents[k]
	u.mu.Unlock()
	if e == nil {
		return
	}
	e.turn <- struct{}{}
	defer func() { <-e.turn }()
	if e.inst != nil {
		inst := e.inst
		e.inst = nil
		stopSafe(inst, reason)
	}
}

// stopAll stops every active instance, as a runner's shutdown does.
func (u *Unit) stopAll() {
	u.mu.Lock()
	keys := make([]entKey, 0, len(u.ents))
	for k := range u.ents {
		keys = append(keys, k)
	}
	u.mu.Unlock()
	for _, k := range keys {
		u.stop(k, entity.StopShardReleased)
	}
}

// Active reports whether the entity has an instance in memory: activated
// by an operation, and not passivated or discarded since.
func (u *Unit) Active(typ, id string) bool {
	u.mu.Lock()
	e := u.ents[entKey{typ, id}]
	u.mu.Unlock()
	if e == nil {
		return false
	}
	e.turn <- struct{}{}
	defer func() { <-e.turn }()
	return e.inst != nil
}

// SavedState is the entity's state as a runner would have stored it (the
// JSON of its type's value after the last save), nil if none was saved.
// It fails the test if typ is not registered.
func (u *Unit) SavedState(typ, id string) json.RawMessage {
	u.tb.Helper()
	u.mustType(typ)
	u.mu.Lock()
	defer u.mu.Unlock()
	if e := u.ents[entKey{typ, id}]; e != nil {
		return slices.Clone(e.saved)
	}
	return nil
}

// Saves is the number of times the entity's state was saved: once per
// writing operation that returned without error and changed it. It fails
// the test if typ is not registered.
func (u *Unit) Saves(typ, id string) int {
	u.tb.Helper()
	u.mustType(typ)
	u.mu.Lock()
	defer u.mu.Unlock()
	if e := u.ents[entKey{typ, id}]; e != nil {
		return e.saves
	}
	return 0
}

// PutState stores state (encoded as JSON) as the entity's saved state, as
// if an earlier run had saved it: the entity's next activation loads it.
// An active instance is passivated first (Passivate). It fails the test if
// typ is not registered or not durable, or state does not encode; it does
// not count as a save.
func (u *Unit) PutState(typ, id string, state any) {
	u.tb.Helper()
	d := u.mustType(typ)
	if !d.Durable() {
		u.tb.Fatalf("tenuretest: PutState %s/%s: type %q keeps no durable state", typ, id, typ)
	}
	raw, err := json.Marshal(state)
	if err != nil {
		u.tb.Fatalf("tenuretest: PutState %s/%s: state does not encode as JSON: %v", typ, id, err)
	}
	k := entKey{typ, id}
	u.Passivate(typ, id)
	e := u.entity(k, d)
	u.mu.Lock()
	e.saved = raw
	u.mu.Unlock()
}

// State decodes the entity's saved state (SavedState) into a T: what a
// runner would load. Without a saved state it is T's zero value; a state
// that does not decode fails the test.
func State[T any](u *Unit, typ, id string) T {
	u.tb.Helper()
	var v T
	raw := u.SavedState(typ, id)
	if raw == nil {
		return v
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		u.tb.Fatalf("tenuretest: state of %s/%s does not decode into %T: %v", typ, id, v, err)
	}
	return v
}

// mustType returns typ's definition, failing the test if it is not
// registered.
func (u *Unit) mustType(typ string) *entity.Definition {
	u.tb.Helper()
	d, ok := u.types[typ]
	if !ok {
		u.tb.Fatalf("tenuretest: unknown entity type %q (registered: %s)", typ, strings.Join(u.names, ", "))
	}
	return d
}

// encode is in as JSON, nil for a nil in.
func encode(in any) ([]byte, error) {
	if in == nil {
		return nil, nil
	}
	return json.Marshal(in)
}
