package entity

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// The scheduler of a shard executor: what is known and due (the due heap,
// fed by listings and wake-ups), the entity mailboxes, the runnable queue
// and the shard's slots. Turns, the mailboxes' state machine, are in
// turn.go and mailbox.go.

// scheduler admits a shard's work and decides what runs when: due
// pointers go to their entity's mailbox (or straight to runnable when
// they name no entity), runnable units start within the shard's and the
// runner's slots, on a worker that hands the task to the attempt pipeline
// (tasks) while it holds its entity's turn.
//
// Invariants (under mu): a task id is in known while it is queued, in a
// mailbox or running, so a listing or wake-up never starts it twice; a
// mailbox is in runnable exactly while its turn is turnQueued; running
// counts the shard's slots in use; from phaseClosing on no message is
// admitted, so workers (which counts admitted messages too) only goes
// down; inflight holds the attempts whose handler runs.
type scheduler struct {
	shardRef
	tasks taskRunner

	kickc chan struct{} // coalescing "something changed"
	// starts counts the units dispatch started but for those a listing
	// queued (see item.listed): activity, for the loop's reconcile pace
	// (see reconcilePace).
	starts atomic.Uint64
	// listed holds the task ids of the last listing's pointers (the loop
	// goroutine's, like reconcile): a pointer counts as fresh only if it
	// was neither known nor listed last time, so that a pointer left
	// alone on purpose (no handler here, its object missing) and found
	// again at every listing is not taken for a lost wake-up.
	listed map[string]bool

	mu       sync.Mutex
	phase    shardPhase
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
	// workers counts the task workers, the sweep, the singletons and the
	// admitted messages (calls and sends, from admission to the end of
	// their turn).
	workers sync.WaitGroup
	// calls lists the messages holding their entity's turn (running), for
	// cancellation and the overrun report.
	calls callList
}

// taskRunner is what the scheduler asks of the attempt pipeline: run one
// due task while its worker holds the task's slot and its entity's turn
// (process), and delete a pointer its commit left for after the turn
// (dropPointer, see dropAfterTurn).
type taskRunner interface {
	process(it *item, box *mailbox)
	dropPointer(ctx context.Context, it *item, stale bool)
}

func (s *scheduler) kick() {
	select {
	case s.kickc <- struct{}{}:
	default:
	}
}

// onWake queues the task a wake-up names, with the note's hint if any, or
// pokes it if it is running (a cancel request).
func (s *scheduler) onWake(note string) {
	n, err := task.ParseWakeNote(note)
	p := n.Pointer
	if err != nil || p.Shard != s.own.Shard {
		s.h.log.Debug("ignoring a wake-up that names no pointer of this shard", "shard", s.own.Shard.String(), "err", err)
		return
	}
	s.mu.Lock()
	if a := s.inflight[p.ID]; a != nil {
		s.mu.Unlock()
		a.poke()
		return
	}
	if s.known[p.ID] {
		s.rewoken[p.ID] = true
		if _, orphan := s.orphans[p.ID]; orphan {
			// Waiting for its object, which the wake-up says is there now.
			s.hurryLocked(p.ID)
		}
		s.mu.Unlock()
		s.kick()
		return
	}
	s.mu.Unlock()
	s.addHinted(p, n.Hint)
}

// hurryLocked makes the queued pointer of task id due now, if it is in the
// heap. It scans the heap: only pointers waiting for their object use it.
// Under mu.
func (s *scheduler) hurryLocked(id string) {
	for i, it := range s.queue {
		if it.ptr.ID == id {
			it.ptr.Due = time.Time{}
			heap.Fix(&s.queue, i)
			return
		}
	}
}

// reconcile lists the shard's ready pointers and queues the unknown ones.
// It returns how many of them are fresh: neither known (from a wake-up or
// an earlier listing) nor in the previous listing; and whether the
// listing got through. After the ownership's first complete listing,
// which finds what was there before, fresh pointers are what lost
// wake-ups left (counted in tenure_tasks_reconcile_found_total).
func (s *scheduler) reconcile() (fresh int, ok bool) {
	s.h.metrics.reconciles.Inc()
	// Before a first complete listing everything is new to this
	// ownership, and none of it says a wake-up was lost.
	counted := s.listed != nil
	defer func() {
		if counted && fresh > 0 {
			s.h.metrics.reconcileFound.Add(float64(fresh))
			s.h.log.Info("reconciliation found ready pointers no wake-up announced", "shard", s.own.Shard.String(), "found", fresh)
		}
	}()
	listed := map[string]bool{}
	after := ""
	for {
		if s.ctx.Err() != nil {
			return fresh, false
		}
		ptrs, more, err := s.h.tasks.ListPointers(s.ctx, s.own.Shard, after, storage.MaxListLimit)
		if err != nil {
			if s.ctx.Err() == nil {
				s.h.log.Warn("listing ready pointers failed; retrying at the next reconciliation", "shard", s.own.Shard.String(), "err", err)
			}
			// Keep what the earlier listing saw too: the pointers not
			// reached this time are still not fresh next time.
			if s.listed != nil {
				for id := range s.listed {
					listed[id] = true
				}
				s.listed = listed
			}
			return fresh, false
		}
		for _, p := range ptrs {
			listed[p.ID] = true
			if s.addItem(&item{ptr: p, listed: true}) && !s.listed[p.ID] {
				fresh++
			}
		}
		if !more || len(ptrs) == 0 {
			break
		}
		after = ptrs[len(ptrs)-1].Key
	}
	s.listed = listed
	return fresh, true
}

// addHinted queues a pointer, with a wake-up's hint (nil if none) for the
// claim, unless its task is already known.
func (s *scheduler) addHinted(p task.Pointer, hint *task.WakeHint) {
	s.addItem(&item{ptr: p, hint: hint})
}

// addItem queues it unless its task is already known, and reports whether
// it did.
func (s *scheduler) addItem(it *item) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known[it.ptr.ID] {
		return false
	}
	s.known[it.ptr.ID] = true
	heap.Push(&s.queue, it)
	s.h.metrics.queued.Inc()
	return true
}

// requeue puts a known item back in the heap, due at due. It is called by
// the worker that holds the item; an entity's task keeps its place at the
// head of the mailbox (see mailbox.held).
func (s *scheduler) requeue(it *item, due time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it.ptr.Due = due
	if box := s.boxes[it.ptr.EntityKey]; it.ptr.EntityKey != "" && box != nil {
		box.held = it.ptr.ID
	}
	heap.Push(&s.queue, it)
	s.h.metrics.queued.Inc()
}

// forget drops a task from the known set once its pointer is gone (or
// parked until the next reconciliation).
func (s *scheduler) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.known, id)
	delete(s.rewoken, id)
}

// dispatch moves due pointers to their mailboxes and starts what the slots
// allow. It returns how long until the next pointer falls due.
func (s *scheduler) dispatch() time.Duration {
	if s.ctx.Err() != nil {
		return time.Hour
	}
	now, err := s.h.tasks.Now(s.ctx)
	if err != nil {
		return time.Second
	}
	s.mu.Lock()
	// Everything due now goes to the mailboxes first, so that an entity's
	// tasks that fell due together start in id order.
	for s.queue.Len() > 0 && !s.queue[0].ptr.Due.After(now.Latest()) {
		it := heap.Pop(&s.queue).(*item)
		s.h.metrics.queued.Dec()
		if it.ptr.EntityKey == "" {
			s.runnable = append(s.runnable, unit{it: it})
			continue
		}
		box := s.boxes[it.ptr.EntityKey]
		if box == nil {
			box = &mailbox{key: it.ptr.EntityKey}
			s.boxes[it.ptr.EntityKey] = box
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
			s.queueLocked(box)
		}
	}
	var start []unit
	for len(s.runnable) > 0 && s.running < s.h.cfg.MaxConcurrentPerShard {
		if !s.h.acquireSlot(s) {
			break
		}
		u := s.runnable[0]
		s.runnable = s.runnable[1:]
		if u.box != nil {
			u.it = u.box.pending[0]
			u.box.pending = u.box.pending[1:]
			s.turnLocked(u.box, turnTask, 0)
			u.box.lastMsg = false
		}
		s.running++
		start = append(start, u)
	}
	next := time.Hour
	if s.queue.Len() > 0 {
		next = max(s.queue[0].ptr.Due.Sub(now.Latest()), time.Millisecond)
	}
	s.mu.Unlock()
	for _, u := range start {
		if !u.it.listed {
			s.starts.Add(1)
		}
	}
	for _, u := range start {
		s.workers.Add(1)
		s.h.metrics.running.Inc()
		go s.work(u)
	}
	return next
}

// work runs one unit, then returns its slots and, for a mailbox with more
// tasks, queues the mailbox again.
func (s *scheduler) work(u unit) {
	defer s.workers.Done()
	var trail trailingDrop
	u.it.trail = &trail
	s.tasks.process(u.it, u.box)
	s.h.metrics.running.Dec()
	s.h.releaseSlot()
	s.mu.Lock()
	s.running--
	if u.box != nil {
		s.endTurnLocked(u.box)
	}
	s.mu.Unlock()
	s.kick()
	if trail.ctx != nil {
		s.tasks.dropPointer(trail.ctx, u.it, false)
		<-s.h.trailing
	}
}

// found clears what was noted of task id while its object was missing.
func (s *scheduler) found(id string) {
	s.mu.Lock()
	delete(s.orphans, id)
	delete(s.rewoken, id)
	s.mu.Unlock()
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
