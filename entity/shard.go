package entity

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/storage"
)

// shardExec executes one owned shard's tasks for as long as the ownership
// lasts. Its loop goroutine discovers ready pointers (listing on start and
// every reconcile interval, and from wake-ups), keeps the not-yet-due ones
// in a heap by due time, hands due ones to entity mailboxes (or straight to
// the runnable queue when they name no entity) and starts runnable units
// within the shard's and the runner's slots.
//
// Invariants (under mu): a task id is in known while it is queued, in a
// mailbox or running, so a listing or wake-up never starts it twice; a
// mailbox is in runnable (queued) or busy, never both; running counts the
// shard's slots in use; once closing is set no message is admitted, so
// workers (which counts admitted messages too) only goes down.
type shardExec struct {
	h   *Host
	own sharding.Ownership
	ctx context.Context // own.Ctx: ends with the ownership

	kickc    chan struct{} // coalescing "something changed"
	loopDone chan struct{} // closed when the loop has stopped taking work
	// stopped is closed once everything the ownership started has
	// returned: the loop, every worker (handler and commit), the retention
	// sweep and the entities' OnStop hooks.
	stopped chan struct{}

	// fate is closed once the manager has said how the ownership ends:
	// handoff (with handoffCtx, live while the lock is still held) or loss.
	fate       chan struct{}
	fateOnce   sync.Once
	handoffCtx context.Context

	mu       sync.Mutex
	queue    dueHeap
	known    map[string]bool
	boxes    map[string]*mailbox
	runnable []unit
	running  int
	inflight map[string]*attempt
	orphans  map[string]time.Time // pointers without a task object: when first seen
	// rewoken holds the known, not running tasks that a wake-up named: a
	// pointer found without its object looks again at once if its
	// submission's wake-up came meanwhile (see orphan).
	rewoken map[string]bool
	// workers counts the task workers, the sweep and the admitted messages
	// (calls and sends, from admission to the end of their turn).
	workers sync.WaitGroup
	// closing is set when the loop has ended, before it waits for workers:
	// admission (under mu) refuses from then on (see turn.go).
	closing bool
	// calls lists the messages holding their entity's turn (running), for
	// cancellation and the overrun report.
	calls callList
	// dec is the detachment decision context messages were last admitted
	// under (see decision).
	dec atomic.Pointer[decision]
	// singletons are the supervisors of the singleton types this
	// ownership runs (set once at start).
	singletons []*supervisor
}

// unit is what one worker runs: one entity-less task, or the head of a
// mailbox.
type unit struct {
	it  *item
	box *mailbox
}

// item is a known ready pointer.
type item struct {
	ptr task.Pointer
	// hint, from the wake-up that queued the pointer, is the task as its
	// submitter wrote it, for a claim without a read (see look). Only the
	// worker holding the item uses it, and drops it once used.
	hint *task.WakeHint
	// trail is the worker's that holds the item (set when it starts): the
	// commit of the task's final outcome leaves the pointer's deletion
	// there, for after the worker has given back its slot and its entity's
	// turn (see dropAfterTurn). It lives with the worker, not the item,
	// because an item put back in the heap goes on to another worker.
	trail *trailingDrop
}

// trailingDrop is a pointer deletion left for after a worker's turn.
type trailingDrop struct {
	ctx context.Context // the deletion's; nil: none left
}

func newShardExec(h *Host, o sharding.Ownership) *shardExec {
	e := &shardExec{
		h:        h,
		own:      o,
		ctx:      o.Ctx,
		kickc:    make(chan struct{}, 1),
		loopDone: make(chan struct{}),
		stopped:  make(chan struct{}),
		fate:     make(chan struct{}),
		known:    map[string]bool{},
		boxes:    map[string]*mailbox{},
		inflight: map[string]*attempt{},
		orphans:  map[string]time.Time{},
		rewoken:  map[string]bool{},
	}
	// A lost shard (not a planned release) cancels the running messages.
	context.AfterFunc(o.Ctx, e.ownershipEnded)
	return e
}

func (e *shardExec) kick() {
	select {
	case e.kickc <- struct{}{}:
	default:
	}
}

// run is the shard's loop.
func (e *shardExec) run() {
	defer func() {
		close(e.loopDone)
		e.mu.Lock()
		e.closing = true
		e.mu.Unlock()
		e.workers.Wait()
		e.stopEntities()
		close(e.stopped)
	}()
	e.startSingletons()
	if e.h.cfg.TaskRetention > 0 {
		e.workers.Add(1)
		go e.sweep()
	}
	wakes, werr := e.h.wakes.WatchWakes(e.ctx, e.own.Shard)
	if werr != nil && e.ctx.Err() == nil {
		e.h.log.Warn("watching wake-ups failed; relying on reconciliation until it works", "shard", e.own.Shard.String(), "err", werr)
	}
	e.reconcile()
	reconcile := time.NewTicker(e.h.cfg.ReconcileInterval)
	defer reconcile.Stop()
	rewatch := time.NewTicker(5 * time.Second)
	defer rewatch.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		next := e.dispatch()
		due.Reset(next)
		select {
		case <-e.ctx.Done():
			return
		case ev, ok := <-wakes:
			if !ok {
				wakes = nil
				continue
			}
			e.h.metrics.wakeups.Inc()
			if ev.Resync {
				e.reconcile()
				continue
			}
			e.onWake(ev.Note)
		case <-rewatch.C:
			if wakes == nil && e.ctx.Err() == nil {
				if ch, err := e.h.wakes.WatchWakes(e.ctx, e.own.Shard); err == nil {
					wakes = ch
					e.reconcile() // wake-ups may have been missed meanwhile
				}
			}
		case <-reconcile.C:
			e.reconcile()
		case <-due.C:
		case <-e.kickc:
		}
	}
}

// onWake queues the task a wake-up names, with the note's hint if any, or
// pokes it if it is running (a cancel request).
func (e *shardExec) onWake(note string) {
	n, err := task.ParseWakeNote(note)
	p := n.Pointer
	if err != nil || p.Shard != e.own.Shard {
		e.h.log.Debug("ignoring a wake-up that names no pointer of this shard", "shard", e.own.Shard.String(), "err", err)
		return
	}
	e.mu.Lock()
	if a := e.inflight[p.ID]; a != nil {
		e.mu.Unlock()
		a.poke()
		return
	}
	if e.known[p.ID] {
		e.rewoken[p.ID] = true
		if _, orphan := e.orphans[p.ID]; orphan {
			// Waiting for its object, which the wake-up says is there now.
			e.hurryLocked(p.ID)
		}
		e.mu.Unlock()
		e.kick()
		return
	}
	e.mu.Unlock()
	e.addHinted(p, n.Hint)
}

// hurryLocked makes the queued pointer of task id due now, if it is in the
// heap. It scans the heap: only pointers waiting for their object use it.
// Under mu.
func (e *shardExec) hurryLocked(id string) {
	for i, it := range e.queue {
		if it.ptr.ID == id {
			it.ptr.Due = time.Time{}
			heap.Fix(&e.queue, i)
			return
		}
	}
}

// reconcile lists the shard's ready pointers and queues the unknown ones.
func (e *shardExec) reconcile() {
	e.h.metrics.reconciles.Inc()
	after := ""
	for e.ctx.Err() == nil {
		ptrs, more, err := e.h.tasks.ListPointers(e.ctx, e.own.Shard, after, storage.MaxListLimit)
		if err != nil {
			if e.ctx.Err() == nil {
				e.h.log.Warn("listing ready pointers failed; retrying at the next reconciliation", "shard", e.own.Shard.String(), "err", err)
			}
			return
		}
		for _, p := range ptrs {
			e.add(p)
		}
		if !more || len(ptrs) == 0 {
			return
		}
		after = ptrs[len(ptrs)-1].Key
	}
}

// add queues a pointer unless its task is already known.
func (e *shardExec) add(p task.Pointer) { e.addHinted(p, nil) }

// addHinted is add with a wake-up's hint (nil if none) for the claim.
func (e *shardExec) addHinted(p task.Pointer, hint *task.WakeHint) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.known[p.ID] {
		return
	}
	e.known[p.ID] = true
	heap.Push(&e.queue, &item{ptr: p, hint: hint})
	e.h.metrics.queued.Inc()
}

// requeue puts a known item back in the heap, due at due. It is called by
// the worker that holds the item; an entity's task keeps its place at the
// head of the mailbox (see mailbox.held).
func (e *shardExec) requeue(it *item, due time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	it.ptr.Due = due
	if box := e.boxes[it.ptr.EntityKey]; it.ptr.EntityKey != "" && box != nil {
		box.held = it.ptr.ID
	}
	heap.Push(&e.queue, it)
	e.h.metrics.queued.Inc()
}

// forget drops a task from the known set once its pointer is gone (or
// parked until the next reconciliation).
func (e *shardExec) forget(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.known, id)
	delete(e.rewoken, id)
}

// dispatch moves due pointers to their mailboxes and starts what the slots
// allow. It returns how long until the next pointer falls due.
func (e *shardExec) dispatch() time.Duration {
	if e.ctx.Err() != nil {
		return time.Hour
	}
	now, err := e.h.tasks.Now(e.ctx)
	if err != nil {
		return time.Second
	}
	e.mu.Lock()
	// Everything due now goes to the mailboxes first, so that an entity's
	// tasks that fell due together start in id order.
	for e.queue.Len() > 0 && !e.queue[0].ptr.Due.After(now.Latest()) {
		it := heap.Pop(&e.queue).(*item)
		e.h.metrics.queued.Dec()
		if it.ptr.EntityKey == "" {
			e.runnable = append(e.runnable, unit{it: it})
			continue
		}
		box := e.boxes[it.ptr.EntityKey]
		if box == nil {
			box = &mailbox{key: it.ptr.EntityKey}
			e.boxes[it.ptr.EntityKey] = box
		}
		released := box.held == it.ptr.ID
		if released {
			box.held = ""
		}
		i, _ := slices.BinarySearchFunc(box.pending, it, func(a, b *item) int { return compareIDs(a.ptr.ID, b.ptr.ID) })
		box.pending = slices.Insert(box.pending, i, it)
		// Not runnable yet: busy (a task or a message), or waiting for
		// its held task. Already runnable: queued.
		if box.turn == turnFree && box.held == "" {
			e.queueLocked(box)
		}
	}
	var start []unit
	for len(e.runnable) > 0 && e.running < e.h.cfg.MaxConcurrentPerShard {
		if !e.h.acquireSlot(e) {
			break
		}
		u := e.runnable[0]
		e.runnable = e.runnable[1:]
		if u.box != nil {
			u.it = u.box.pending[0]
			u.box.pending = u.box.pending[1:]
			e.turnLocked(u.box, turnTask, 0)
			u.box.lastMsg = false
		}
		e.running++
		start = append(start, u)
	}
	next := time.Hour
	if e.queue.Len() > 0 {
		next = max(e.queue[0].ptr.Due.Sub(now.Latest()), time.Millisecond)
	}
	e.mu.Unlock()
	for _, u := range start {
		e.workers.Add(1)
		e.h.metrics.running.Inc()
		go e.work(u)
	}
	return next
}

// compareIDs orders task ids as submitted: UUIDv7 ids sort by creation.
func compareIDs(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// work runs one unit, then returns its slots and, for a mailbox with more
// tasks, queues the mailbox again.
func (e *shardExec) work(u unit) {
	defer e.workers.Done()
	var trail trailingDrop
	u.it.trail = &trail
	e.process(u.it, u.box)
	e.h.metrics.running.Dec()
	e.h.releaseSlot()
	e.mu.Lock()
	e.running--
	if u.box != nil {
		e.endTurnLocked(u.box)
	}
	e.mu.Unlock()
	e.kick()
	if trail.ctx != nil {
		e.dropPointer(trail.ctx, u.it, false)
		<-e.h.trailing
	}
}

// passivate stops an idle instance of this shard.
func (e *shardExec) passivate(in *instance, reason StopReason) {
	e.mu.Lock()
	box := in.box
	if box.turn.busy() || box.inst != in {
		e.mu.Unlock()
		return
	}
	box.inst = nil
	e.dropIfIdleLocked(box)
	e.mu.Unlock()
	e.h.stopInstance(context.Background(), in, reason)
}

// dueHeap orders pointers by due time, then id.
type dueHeap []*item

func (q dueHeap) Len() int { return len(q) }
func (q dueHeap) Less(i, j int) bool {
	if !q[i].ptr.Due.Equal(q[j].ptr.Due) {
		return q[i].ptr.Due.Before(q[j].ptr.Due)
	}
	return q[i].ptr.ID < q[j].ptr.ID
}
func (q dueHeap) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *dueHeap) Push(x any)   { *q = append(*q, x.(*item)) }
func (q *dueHeap) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
