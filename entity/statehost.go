package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
)

// The host's side of durable state: activation loads and fences the state
// (activateState), stateCore writes it (now, staged for a task, or behind)
// and flushes it when the instance stops.

// appliedKeep is how many applied task ids an envelope keeps: a task whose
// completion commit was lost is retried within a few attempts, long before
// 32 later tasks of the same entity have completed.
const appliedKeep = 32

var errStateNoEntity = errors.New("entity: a stateful entity type needs tasks that name an entity id")

// Outcomes of the state metrics' outcome labels.
const (
	stateOK       = "ok"
	stateAbsent   = "absent"
	stateCorrupt  = "corrupt"
	stateFenced   = "fenced"
	stateError    = "error"
	stateConflict = "conflict"
	stateTooLarge = "too_large"
)

// stateCore is one resident instance's durable state as the host sees it:
// the version last read or written, and what is waiting to be written.
type stateCore struct {
	e       *shardRef
	typ, id string
	key     string
	behind  time.Duration // WriteBehind; 0: write on Save

	wmu sync.Mutex // serialises writes, so each starts from the last ETag

	mu   sync.Mutex
	env  *state.Envelope // as stored
	etag string
	// fenced is set once a write was refused: the instance's memory is
	// stale and it must be discarded.
	fenced error
	// uncertain is set by a write whose outcome is unknown (a timeout, a
	// lost answer: it may have landed) and cleared by the next write that
	// lands: until then the instance's memory may not be what S3 holds,
	// so it is discarded before its next turn and the state read again,
	// lest a read answer a total without a write that did land.
	uncertain error
	// seq numbers the snapshots Save takes; written is the latest one
	// stored, so an older snapshot (a write-behind flush racing a task's
	// write) is never written over a newer one.
	seq, written int64
	// inTask: a task's handler runs; Save stages into staged.
	inTask    bool
	staged    json.RawMessage
	stagedSeq int64
	// pending is the state a write-behind Save left dirty; timer writes it.
	pending    json.RawMessage
	pendingSeq int64
	timer      *time.Timer
	timerDone  chan struct{}
	closed     bool
}

// loaded is the stored state, nil when none.
func (c *stateCore) loaded() json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.env.HasState() {
		return nil
	}
	return c.env.State
}

func (c *stateCore) rev() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.env.Rev
}

// stale reports the fenced error once a write was refused, or the error
// of a write whose outcome is unknown.
func (c *stateCore) stale() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fenced != nil {
		return c.fenced
	}
	return c.uncertain
}

// save is State.Save's host side.
func (c *stateCore) save(ctx context.Context, raw json.RawMessage) error {
	limit := c.e.h.cfg.MaxStateSize
	if len(raw) > limit {
		c.e.h.metrics.stateSaves[stateTooLarge].Inc()
		return fmt.Errorf("entity %s/%s: %w", c.typ, c.id, &state.TooLargeError{Key: c.key, Size: len(raw), Limit: limit})
	}
	c.mu.Lock()
	c.seq++
	seq := c.seq
	switch {
	case c.fenced != nil:
		err := c.fenced
		c.mu.Unlock()
		return err
	case c.inTask:
		c.staged, c.stagedSeq = raw, seq
		c.mu.Unlock()
		return nil
	case c.behind > 0 && !c.closed:
		c.pending, c.pendingSeq = raw, seq
		if c.timer == nil {
			c.armLocked()
		}
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	return c.write(ctx, raw, seq, nil)
}

// write stores raw, the snapshot seq, over the version last read or
// written, recording rec's task when given; a snapshot older than the one
// stored is skipped. A refusal marks the core fenced.
func (c *stateCore) write(ctx context.Context, raw json.RawMessage, seq int64, rec *state.Applied) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.fenced != nil {
		err := c.fenced
		c.mu.Unlock()
		return err
	}
	if seq <= c.written {
		c.mu.Unlock()
		return nil
	}
	next, etag := c.env.Clone(), c.etag
	c.mu.Unlock()
	next.State = raw
	if rec != nil {
		next.Record(rec.Task, rec.Result, appliedKeep)
	}
	m := c.e.h.metrics
	shard, epoch := c.e.own.Shard, c.e.own.Epoch
	// In doubt from before the request is sent: a write in flight may land
	// after an activation's read (see doubts).
	c.e.h.doubts.begin(shard, epoch, c.key)
	start := time.Now()
	netag, err := c.e.h.states.Save(ctx, shard, next, etag)
	m.stateSaveDur.Observe(time.Since(start).Seconds())
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		c.e.h.doubts.end(shard, epoch, c.key, writeLanded)
		m.stateSaves[stateOK].Inc()
		m.stateBytes.Observe(float64(len(raw)))
		c.env, c.etag, c.written, c.uncertain = next, netag, seq, nil
		return nil
	case errors.Is(err, state.ErrFenced):
		c.e.h.doubts.end(shard, epoch, c.key, writeRefused)
		m.stateSaves[stateConflict].Inc()
		c.fenced = fmt.Errorf("entity %s/%s: %w", c.typ, c.id, err)
		return c.fenced
	case errors.Is(err, state.ErrTooLarge):
		c.e.h.doubts.end(shard, epoch, c.key, writeRefused)
		m.stateSaves[stateTooLarge].Inc()
	default:
		c.e.h.doubts.end(shard, epoch, c.key, writeUnknown)
		m.stateSaves[stateError].Inc()
		c.uncertain = fmt.Errorf("entity %s/%s: the outcome of a state write is unknown: %w", c.typ, c.id, err)
	}
	return fmt.Errorf("entity %s/%s: save state: %w", c.typ, c.id, err)
}

// applied returns the recorded result of task id when the stored state
// already contains its effect.
func (c *stateCore) applied(id string) (json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.env.AppliedResult(id)
}

// beginTask makes Save stage until endTask.
func (c *stateCore) beginTask() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inTask, c.staged = true, nil
}

// dropTask ends a task's handler that failed: what it staged is dropped.
func (c *stateCore) dropTask() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inTask, c.staged = false, nil
}

// endTask ends a task's handler that succeeded: the staged state, if any,
// is written with the task's id and result. A write-behind snapshot still
// pending is older and will be skipped.
func (c *stateCore) endTask(ctx context.Context, id string, result json.RawMessage) error {
	c.mu.Lock()
	raw, seq := c.staged, c.stagedSeq
	c.inTask, c.staged = false, nil
	c.mu.Unlock()
	if raw == nil {
		return nil
	}
	return c.write(ctx, raw, seq, &state.Applied{Task: id, Result: result})
}

// armLocked starts the write-behind timer. Its callback flushes under the
// ownership's context (once the shard is lost nothing is written: the
// successor owns the object), and re-arms itself when a Save came during
// the flush or the flush failed. close waits for a callback under way, so
// no flush outlives the instance.
func (c *stateCore) armLocked() {
	done := make(chan struct{})
	c.timerDone = done
	c.timer = time.AfterFunc(c.behind, func() {
		defer close(done)
		if err := c.flush(c.e.ctx); err != nil {
			c.e.h.log.Warn("write-behind state flush failed", "type", c.typ, "entity", c.id, "err", err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.timer = nil
		if c.pending != nil && !c.closed && c.fenced == nil && c.e.ctx.Err() == nil {
			c.armLocked()
		}
	})
}

// flush writes the pending state, if any. A write that fails for a reason
// other than the fence leaves it pending for the next flush.
func (c *stateCore) flush(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil // a lost shard's, or close's after a release: left pending
	}
	c.mu.Lock()
	raw, seq := c.pending, c.pendingSeq
	c.pending = nil
	c.mu.Unlock()
	if raw == nil {
		return nil
	}
	err := c.write(ctx, raw, seq, nil)
	if err != nil && !errors.Is(err, state.ErrFenced) {
		c.mu.Lock()
		if c.pending == nil {
			c.pending, c.pendingSeq = raw, seq
		}
		c.mu.Unlock()
	}
	return err
}

// close stops the write-behind timer, waiting for a flush it started, and
// flushes what is pending under ctx unless the shard was lost (lost: ctx
// is nil).
func (c *stateCore) close(ctx context.Context) {
	c.mu.Lock()
	c.closed = true
	t, done := c.timer, c.timerDone
	c.timer = nil
	c.mu.Unlock()
	if t != nil && !t.Stop() {
		<-done
	}
	if ctx == nil {
		return
	}
	if err := c.flush(ctx); err != nil {
		c.e.h.log.Warn("state flush on stop failed", "type", c.typ, "entity", c.id, "err", err)
	}
}

// activateState loads and fences the state of (typ, id) for this ownership
// and binds it to a new instance from b. A newer stored epoch is an
// ErrStateFenced (the shard is being lost), a corrupt object an
// ErrStateCorrupt naming the key.
func (r *residency) activateState(b binder, typ, id string) (Entity, *stateCore, error) {
	m := r.h.metrics
	ctx, cancel := context.WithTimeout(r.ctx, r.h.cfg.HookTimeout)
	defer cancel()
	start := time.Now()
	key := state.Key(r.own.Shard, typ, id)
	fence := r.h.states.Fence
	doubted := r.h.doubts.doubted(r.own.Shard, r.own.Epoch, key)
	if doubted {
		// A write of ours may still land: write the object back so that
		// it cannot land after this read (see doubts).
		fence = r.h.states.Refence
		m.stateRefences.Inc()
	}
	env, etag, err := fence(ctx, r.own.Shard, typ, id, r.own.Epoch, r.h.runnerID)
	m.stateLoadDur.Observe(time.Since(start).Seconds())
	if err == nil && doubted {
		r.h.doubts.refenced(r.own.Shard, r.own.Epoch, key)
	}
	switch {
	case errors.Is(err, state.ErrCorrupt):
		m.stateLoads[stateCorrupt].Inc()
		r.h.log.Error("entity state is corrupt; the entity is not activated", "type", typ, "entity", id, "err", err)
		return nil, nil, fmt.Errorf("entity %s/%s: %w", typ, id, err)
	case errors.Is(err, state.ErrFenced):
		m.stateLoads[stateFenced].Inc()
		return nil, nil, fmt.Errorf("entity %s/%s: %w", typ, id, err)
	case err != nil:
		m.stateLoads[stateError].Inc()
		return nil, nil, fmt.Errorf("entity %s/%s: load state: %w", typ, id, err)
	case env.HasState():
		m.stateLoads[stateOK].Inc()
	default:
		m.stateLoads[stateAbsent].Inc()
	}
	c := &stateCore{e: &r.shardRef, typ: typ, id: id, key: key,
		behind: b.options().writeBehind, env: env, etag: etag}
	ent, err := b.bind(c)
	if err != nil {
		if errors.Is(err, state.ErrCorrupt) {
			m.stateLoads[stateCorrupt].Inc()
		}
		return nil, nil, fmt.Errorf("entity %s/%s: %w", typ, id, err)
	}
	return ent, c, nil
}

// handleStateful runs a task's handler on ent. For a stateful entity (sc
// not nil) a task whose effect the stored state already contains is not
// run again: it completes with the recorded result. Otherwise the state
// the handler saved is written, with the task's id and result, when it
// returns successfully, before the caller commits the completion.
func (p *pipeline) handleStateful(ctx context.Context, ent Entity, sc *stateCore, t *task.Task) (json.RawMessage, error) {
	if sc == nil {
		return safeHandle(ctx, ent, t)
	}
	if result, ok := sc.applied(t.ID); ok {
		p.h.log.Info("task already applied to the entity's state; completing it with the recorded result",
			"task", t.Ref(), "type", t.Type, "entity", t.Entity)
		return result, nil
	}
	sc.beginTask()
	result, err := safeHandle(ctx, ent, t)
	if err != nil {
		sc.dropTask()
		return nil, err
	}
	wctx := p.ctx
	if wctx.Err() != nil {
		// A planned release writes under the handoff context, while the
		// lock is held; after a loss the successor reruns the task.
		if wctx = p.fate.await(); wctx == nil {
			sc.dropTask()
			return nil, fmt.Errorf("entity %s/%s: state not written: %w", t.Type, t.Entity, context.Cause(p.ctx))
		}
	}
	if err := sc.endTask(wctx, t.ID, result); err != nil {
		return nil, err
	}
	return result, nil
}
