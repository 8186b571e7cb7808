package entity

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// instance is one resident entity: the Entity a factory made for (typ, id),
// living in the mailbox of its entity key on one shard executor.
type instance struct {
	typ, id  string
	ent      Entity
	box      *mailbox
	exec     *shardExec
	state    *stateCore    // nil unless the type is stateful
	elem     *list.Element // in residents.lru; guarded by residents.mu
	lastUsed time.Time     // guarded by residents.mu
}

// residents is the runner-wide LRU of resident instances (front: most
// recently used).
type residents struct {
	mu  sync.Mutex
	lru *list.List
}

func (r *residents) init() { r.lru = list.New() }

func (r *residents) add(h *Host, in *instance) {
	r.mu.Lock()
	in.lastUsed = time.Now()
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
		v.exec.passivate(v, StopEvicted)
	}
}

func (r *residents) touch(in *instance) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in.lastUsed = time.Now()
	if in.elem != nil {
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

// passivateIdle stops the instances unused since before.
func (r *residents) passivateIdle(h *Host, before time.Time) {
	r.mu.Lock()
	var idle []*instance
	for e := r.lru.Back(); e != nil; e = e.Prev() {
		in := e.Value.(*instance)
		if in.lastUsed.After(before) {
			break
		}
		idle = append(idle, in)
	}
	r.mu.Unlock()
	for _, in := range idle {
		in.exec.passivate(in, StopIdle)
	}
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
