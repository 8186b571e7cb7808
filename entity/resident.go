package entity

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// residency keeps a shard's resident entities: the instance in each
// mailbox (activated on the first task or message of its entity, with
// its durable state), touched in the runner-wide LRU after each turn, and
// stopped when idle, evicted, broken (a panic, a fenced state) or when
// the ownership ends. An instance is used only by whoever holds its
// mailbox's turn (several readers in a reading turn), and replaced or
// stopped only by a sole holder or when no one holds it (passivate).
type residency struct {
	shardRef
	s *scheduler // its mu guards the writes of mailbox.inst
}

// instance is one resident entity: the Entity a factory made for (typ, id),
// living in the mailbox of its entity key on one shard executor.
type instance struct {
	typ, id string
	ent     Entity
	box     *mailbox
	res     *residency
	state   *stateCore    // nil unless the type is stateful
	elem    *list.Element // in residents.lru; guarded by residents.mu
	// listed is when the instance was last put at the LRU's front and
	// lastUsed when it was last used (monoNow): lastUsed is exact, listed
	// lags it by up to promoteEvery. listed is written under residents.mu.
	listed, lastUsed atomic.Int64
}

// promoteEvery is how stale an instance's place in the LRU may get before
// a use moves it to the front. Moving it on every use put every call on
// every core through one runner-wide mutex (twice: when the turn starts
// and when it ends); now a busy entity takes it at most once per
// promoteEvery. The list so orders instances by use to within
// promoteEvery, which is all eviction needs, and idle passivation reads
// the exact lastUsed.
const promoteEvery = 100 * time.Millisecond

// monoOrigin is the origin of monoNow.
var monoOrigin = time.Now()

// monoNow is a monotonic clock in nanoseconds: the LRU's order must not
// follow a wall clock stepped back.
func monoNow() int64 { return int64(time.Since(monoOrigin)) }

// mono is t on monoNow's clock (t from time.Now, with its monotonic
// reading).
func mono(t time.Time) int64 { return int64(t.Sub(monoOrigin)) }

// residents is the runner-wide LRU of resident instances (front: most
// recently put there; see promoteEvery).
type residents struct {
	mu  sync.Mutex
	lru *list.List
}

func (r *residents) init() { r.lru = list.New() }

func (r *residents) add(h *Host, in *instance) {
	r.mu.Lock()
	now := monoNow()
	in.listed.Store(now)
	in.lastUsed.Store(now)
	in.elem = r.lru.PushFront(in)
	n := r.lru.Len()
	var victims []*instance
	if n > h.cfg.MaxResident {
		// Least recently used first; busy ones are skipped by passivate.
		for e := r.lru.Back(); e != nil && len(victims) < n-h.cfg.MaxResident+8; e = e.Prev() {
			if v := e.Value.(*instance); v != in {
				victims = append(victims, v)
			}
		}
	}
	r.mu.Unlock()
	h.metrics.resident.Set(float64(n))
	for _, v := range victims {
		if r.len() <= h.cfg.MaxResident {
			break
		}
		v.res.passivate(v, StopEvicted)
	}
}

func (r *residents) touch(in *instance) {
	now := monoNow()
	in.lastUsed.Store(now)
	if now-in.listed.Load() < int64(promoteEvery) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if in.elem != nil {
		// Read under the lock, so that the list stays in listed order.
		in.listed.Store(monoNow())
		r.lru.MoveToFront(in.elem)
	}
}

func (r *residents) remove(h *Host, in *instance) {
	r.mu.Lock()
	if in.elem != nil {
		r.lru.Remove(in.elem)
		in.elem = nil
	}
	n := r.lru.Len()
	r.mu.Unlock()
	h.metrics.resident.Set(float64(n))
}

func (r *residents) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lru.Len()
}

// passivateIdle stops the instances unused since before. It walks the
// LRU from the back while the instances were listed before then (those in
// front of one listed later were listed later still, and used since);
// one used since but not moved is moved to the front now.
func (r *residents) passivateIdle(h *Host, before time.Time) {
	for _, in := range r.idle(before) {
		in.res.passivate(in, StopIdle)
	}
}

// idle returns the instances unused since before (see passivateIdle).
func (r *residents) idle(before time.Time) []*instance {
	b := mono(before)
	r.mu.Lock()
	var idle []*instance
	for e := r.lru.Back(); e != nil; {
		in := e.Value.(*instance)
		if in.listed.Load() > b {
			break
		}
		prev := e.Prev()
		if in.lastUsed.Load() <= b {
			idle = append(idle, in)
		} else {
			in.listed.Store(monoNow())
			r.lru.MoveToFront(e)
		}
		e = prev
	}
	r.mu.Unlock()
	return idle
}

// stopInstance runs an instance's OnStop under ctx, bounded by the hook
// timeout and guarded against panics, then flushes its write-behind state
// under the same context, unless the shard was lost: then the successor
// owns the state and nothing is written.
func (h *Host) stopInstance(ctx context.Context, in *instance, reason StopReason) {
	h.resident.remove(h, in)
	h.metrics.passivations.WithLabelValues(string(reason)).Inc()
	ctx, cancel := context.WithTimeout(ctx, h.cfg.HookTimeout)
	defer cancel()
	if s, ok := in.ent.(Stopper); ok {
		func() {
			defer func() {
				if v := recover(); v != nil {
					h.log.Error("entity OnStop panicked", "type", in.typ, "entity", in.id, "panic", v)
				}
			}()
			s.OnStop(ctx, reason)
		}()
	}
	if in.state != nil {
		if reason == StopShardLost {
			ctx = nil
		}
		in.state.close(ctx)
	}
}

// instanceFor returns the instance of entity (typ, id) for a task or a
// message holding its mailbox's turn: the mailbox's resident one (created
// on the first task or message), or a fresh one for an entity-less task
// (nil box).
//
// A stateful type's instance comes with its durable state, loaded and
// fenced before OnStart (see activateState); a resident one whose state
// was fenced off since is discarded and activated afresh.
func (r *residency) instanceFor(box *mailbox, typ, id string) (Entity, *stateCore, error) {
	f, ok := r.h.reg.lookup(typ)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q", ErrNoHandler, typ)
	}
	if box == nil {
		ent, err := newEntity(f, id)
		return ent, nil, err
	}
	in := box.inst.Load()
	if in != nil && in.typ == typ && in.id == id {
		if in.state == nil || in.state.stale() == nil {
			// Touched when the turn ends (afterTurn): until then it is
			// busy, which passivation and eviction pass over.
			return in.ent, in.state, nil
		}
		r.discard(box)
		in = nil
	}
	if in != nil {
		// Two entities share the mailbox's key (a hash collision): the
		// resident one makes room.
		r.passivateBusy(box, in)
	}
	ent, err := newEntity(f, id)
	if err != nil {
		return nil, nil, err
	}
	var sc *stateCore
	if b, ok := ent.(binder); ok {
		if ent, sc, err = r.activateState(b, typ, id); err != nil {
			return nil, nil, err
		}
	}
	if s, ok := ent.(Starter); ok {
		ctx, cancel := context.WithTimeout(r.ctx, r.h.cfg.HookTimeout)
		err := safeHook(func() error { return s.OnStart(ctx) })
		cancel()
		if err != nil {
			if sc != nil {
				sc.close(nil) // not activated: nothing of it is written
			}
			return nil, nil, fmt.Errorf("entity %s/%s: OnStart: %w", typ, id, err)
		}
	}
	in = &instance{typ: typ, id: id, ent: ent, box: box, res: r, state: sc}
	r.s.mu.Lock()
	box.inst.Store(in)
	r.s.mu.Unlock()
	r.h.resident.add(r.h, in)
	return ent, sc, nil
}

// afterTurn is the end of a handler's turn for its mailbox's instance: a
// panic (err) discards it, anything else marks it used. It reports whether
// the handler panicked.
func (r *residency) afterTurn(box *mailbox, err error) (panicked bool) {
	if isPanic(err) {
		r.discard(box)
		return true
	}
	if errors.Is(err, ErrStateFenced) {
		r.discard(box) // its memory is stale
		return false
	}
	if box != nil {
		if in := box.inst.Load(); in != nil {
			r.h.resident.touch(in)
		}
	}
	return false
}

// discard stops the resident instance of a mailbox whose turn its caller
// holds (so the instance is the one that ran), after its handler
// panicked: its state may be broken.
func (r *residency) discard(box *mailbox) {
	if box == nil {
		return
	}
	r.s.mu.Lock()
	in := box.inst.Load()
	if in == nil {
		r.s.mu.Unlock()
		return
	}
	box.inst.Store(nil)
	r.s.mu.Unlock()
	r.h.stopInstance(context.Background(), in, StopFailed)
}

// passivateBusy stops the resident instance of a mailbox its worker holds.
func (r *residency) passivateBusy(box *mailbox, in *instance) {
	r.s.mu.Lock()
	if box.inst.Load() == in {
		box.inst.Store(nil)
	}
	r.s.mu.Unlock()
	r.h.stopInstance(context.Background(), in, StopEvicted)
}

// passivate stops an idle instance of this shard.
func (r *residency) passivate(in *instance, reason StopReason) {
	r.s.mu.Lock()
	box := in.box
	if box.turn.busy() || box.inst.Load() != in {
		r.s.mu.Unlock()
		return
	}
	box.inst.Store(nil)
	r.s.dropIfIdleLocked(box)
	r.s.mu.Unlock()
	r.h.stopInstance(context.Background(), in, reason)
}

// stopAll stops every instance of the shard once its workers are done,
// with reason, running the OnStop hooks under ctx, and drops the mailboxes
// and the due heap.
func (r *residency) stopAll(ctx context.Context, reason StopReason) {
	r.s.mu.Lock()
	var insts []*instance
	for _, box := range r.s.boxes {
		if box.inst.Load() != nil {
			insts = append(insts, box.inst.Load())
			box.inst.Store(nil)
		}
	}
	clear(r.s.boxes)
	n := r.s.queue.Len()
	r.s.queue = nil
	r.s.mu.Unlock()
	r.h.metrics.queued.Sub(float64(n))
	// A shard may hold thousands of resident entities, and a planned
	// release waits for their hooks within the interrupt timeout: run them
	// side by side, a bounded number at a time.
	sem := make(chan struct{}, stopHookConcurrency)
	var wg sync.WaitGroup
	for _, in := range insts {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r.h.stopInstance(ctx, in, reason)
		}()
	}
	wg.Wait()
}
