package entity

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tenurehq/tenure/entity/task"
)

// Entity is one instance of an entity type. It handles the tasks addressed
// to its (type, id) one at a time, in submission order, and may keep state
// in memory between them; that memory is lost when the instance is
// passivated or its shard moves, so durable state belongs in a State (see
// Stateful), the task results or the user's own storage.
//
// Handle must honour ctx: it is cancelled when the task is cancelled, its
// timeout passes, its claim is lost, or the runner detaches or loses the
// shard. A returned error fails the attempt (see Permanent); the result is
// stored in the task and must be valid JSON (or empty).
type Entity interface {
	Handle(ctx context.Context, t *task.Task) (json.RawMessage, error)
}

// Starter is implemented by entities that need to prepare before their
// first task. An error fails that task's attempt and discards the instance.
type Starter interface {
	OnStart(ctx context.Context) error
}

// Stopper is implemented by entities that need to know when they are
// passivated or stopped.
type Stopper interface {
	OnStop(ctx context.Context, reason StopReason)
}

// StopReason says why an instance stopped.
type StopReason string

const (
	// StopIdle: no task for Config.MaxIdle.
	StopIdle StopReason = "idle"
	// StopEvicted: passivated to stay within Config.MaxResident.
	StopEvicted StopReason = "evicted"
	// StopShardReleased: its shard was handed over in a planned release.
	StopShardReleased StopReason = "shard-released"
	// StopShardLost: its shard was lost or the runner detached.
	StopShardLost StopReason = "shard-lost"
	// StopFailed: OnStart failed or the instance panicked.
	StopFailed StopReason = "failed"
)

// Factory creates the instance of an entity type for an entity id.
type Factory func(id string) (Entity, error)

// HandlerFunc handles tasks of a type without per-entity state. Tasks that
// name an entity still run one at a time per entity; tasks that do not run
// concurrently.
type HandlerFunc func(ctx context.Context, t *task.Task) (json.RawMessage, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	return f(ctx, t)
}

var typeName = regexp.MustCompile(`^[A-Za-z0-9_:-]{1,128}$`)

// registry holds the registered types. It is read on every call and task
// (twice per call) and written only while a service registers its types,
// so a write copies the map and readers load it without a lock: a read
// lock's shared counter was a point of contention between cores.
type registry struct {
	mu    sync.Mutex // serializes writers
	types atomic.Pointer[map[string]regType]
}

// all returns the registered types; the map must not be changed.
func (r *registry) all() map[string]regType {
	if m := r.types.Load(); m != nil {
		return *m
	}
	return nil
}

// regType is a registered type: its factory, and its Definition if Define
// made it (nil otherwise).
type regType struct {
	f   Factory
	def *Definition
}

// define registers a type made by Define.
func (r *registry) define(d *Definition) error {
	if d == nil {
		return fmt.Errorf("%w: nil entity definition", ErrInvalidConfig)
	}
	if d.defErr != nil {
		return d.defErr
	}
	return r.add(d.name, regType{f: d.factory(), def: d})
}

// definition returns the Definition of typ if Define made it.
func (r *registry) definition(typ string) (*Definition, bool) {
	rt, ok := r.entry(typ)
	return rt.def, ok && rt.def != nil
}

func (r *registry) register(typ string, f Factory) error {
	if f == nil {
		return fmt.Errorf("%w: task type %q: nil factory", ErrInvalidConfig, typ)
	}
	return r.add(typ, regType{f: f})
}

// add registers rt as typ, once.
func (r *registry) add(typ string, rt regType) error {
	if !typeName.MatchString(typ) {
		return fmt.Errorf("%w: task type %q must match %s", ErrInvalidConfig, typ, typeName)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.all()
	if _, dup := cur[typ]; dup {
		return fmt.Errorf("%w: task type %q registered twice", ErrInvalidConfig, typ)
	}
	next := maps.Clone(cur)
	if next == nil {
		next = map[string]regType{}
	}
	next[typ] = rt
	r.types.Store(&next)
	return nil
}

// registerFunc registers a type handled by fn, with no per-entity state.
func (r *registry) registerFunc(typ string, fn HandlerFunc) error {
	if fn == nil {
		return fmt.Errorf("%w: task type %q: nil handler", ErrInvalidConfig, typ)
	}
	return r.register(typ, func(string) (Entity, error) { return fn, nil })
}

// clone returns a registry holding r's types; nil r gives an empty one.
func (r *registry) clone() *registry {
	m := map[string]regType{}
	if r != nil {
		maps.Copy(m, r.all())
	}
	c := &registry{}
	c.types.Store(&m)
	return c
}

func (r *registry) lookup(typ string) (Factory, bool) {
	rt, ok := r.entry(typ)
	return rt.f, ok
}

// entry returns the registered type typ: its factory and its Definition
// (Deliver's path).
func (r *registry) entry(typ string) (regType, bool) {
	rt, ok := r.all()[typ]
	return rt, ok
}

func (r *registry) names() []string {
	types := r.all()
	out := make([]string, 0, len(types))
	for n := range types {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
