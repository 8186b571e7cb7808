package entity

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/tenurehq/tenure/sharding"
)

// Turns: an entity's tasks and messages share its mailbox and run one at a
// time. A message takes the turn at once when the mailbox is free (neither
// busy nor queued: a held task waiting in the due heap does not block it)
// and runs on the caller's goroutine; otherwise it waits in the mailbox's
// FIFO. Whoever ends a turn hands it on (endTurnLocked): to the first
// waiting message or to the head task, alternating when both wait, so that
// neither starves the other. A task handed the turn goes through runnable
// and the slots, like any task; a message handed the turn is woken.
//
// Admission (gateLocked) follows the task gate: the executor's ownership
// under the caller's epoch, and the detachment decision attached. Messages
// have no S3 fence, so they stay bound to the decision they were admitted
// under in every mode: its end cancels them (decisionEnded). A lost shard
// cancels them too (ownershipEnded); a planned release lets the running
// ones finish (ShardReleasing waits for them while the lock is held) and
// refuses the waiting ones.

// decision is a detachment decision context messages were admitted under.
type decision struct{ ctx context.Context }

// decision returns the runner's current detachment decision context, nil
// if the ownership has no machine (always attached). A decision context
// still live is the current one: the machine makes a new one only after
// the previous one has ended, so the last one seen is cached and the
// machine's lock taken only after a detach.
func (e *shardExec) decision() context.Context {
	if e.own.Enforcement == nil {
		return nil
	}
	old := e.dec.Load()
	if old != nil && old.ctx.Err() == nil {
		return old.ctx
	}
	ctx := e.own.Enforcement().Ctx
	if ctx == nil {
		return nil
	}
	if (old == nil || old.ctx != ctx) && e.dec.CompareAndSwap(old, &decision{ctx: ctx}) {
		context.AfterFunc(ctx, func() { e.decisionEnded(ctx) })
	}
	return ctx
}

// decisionEnded cancels the running messages admitted under the decision
// context dctx, which has ended.
func (e *shardExec) decisionEnded(dctx context.Context) {
	cause := context.Cause(dctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	for c := e.calls.head; c != nil; c = c.next {
		if c.dec == dctx {
			c.cancel(cause)
		}
	}
}

// ownershipEnded cancels the running messages when the shard is lost; in a
// planned release they finish, and ShardReleasing waits for them.
func (e *shardExec) ownershipEnded() {
	cause := context.Cause(e.ctx)
	if releasing(cause) {
		return
	}
	e.cancelCalls(cause)
}

// cancelCalls cancels every running message with cause.
func (e *shardExec) cancelCalls(cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for c := e.calls.head; c != nil; c = c.next {
		c.cancel(cause)
	}
}

// releasing reports whether an ownership ended with cause by a planned
// release.
func releasing(cause error) bool {
	var lost *sharding.LostError
	return errors.As(cause, &lost) && lost.Reason == sharding.LossReleased
}

// gateLocked refuses a message that may not start now: the ownership has
// ended (shard moving in a planned release, not owner otherwise), or the
// detachment decision dctx has ended. Under mu.
func (e *shardExec) gateLocked(dctx context.Context) error {
	if dctx != nil && dctx.Err() != nil {
		return e.refusal(RefusedNotAttached)
	}
	if e.closing || e.ctx.Err() != nil {
		return e.endedRefusal()
	}
	return nil
}

// endedRefusal is the refusal of a message reaching an ended ownership.
func (e *shardExec) endedRefusal() error {
	cause := context.Cause(e.ctx)
	var lost *sharding.LostError
	switch {
	case releasing(cause):
		return e.refusal(RefusedShardMoving)
	case errors.As(cause, &lost) && lost.Reason == sharding.LossDetached:
		return e.refusal(RefusedNotAttached)
	}
	return &RefusedError{Reason: RefusedNotOwner, Shard: e.own.Shard}
}

func (e *shardExec) refusal(r RefusalReason) error {
	return &RefusedError{Reason: r, Shard: e.own.Shard, Epoch: e.own.Epoch}
}

// takeTurnLocked gives c its entity's turn if the mailbox is free (or c
// is read-only and may join the readers holding it), or queues c behind
// the turn; it reports whether c holds the turn. Under mu.
func (e *shardExec) takeTurnLocked(c *call, key string) bool {
	box := e.boxes[key]
	if box == nil {
		box = &mailbox{key: key}
		e.boxes[key] = box
	}
	c.box = box
	switch {
	case box.turn == turnFree:
		e.grantLocked(box, c)
		return true
	case c.ro && box.canJoin(c):
		e.joinLocked(box, c)
		return true
	}
	c.ready = make(chan struct{})
	box.waiting = append(box.waiting, c)
	return false
}

// grantLocked gives c the turn of box, which is free or being handed on:
// alone for a writing message, as the first reader for a read-only one.
// Under mu.
func (e *shardExec) grantLocked(box *mailbox, c *call) {
	to, readers := turnMessage, 0
	if c.ro {
		to, readers = turnReading, 1
	}
	e.turnLocked(box, to, readers)
	box.lastMsg = true
	e.calls.push(c)
}

// joinLocked lets the read-only message c share the reading turn of box,
// on the instance its first reader activated. Under mu.
func (e *shardExec) joinLocked(box *mailbox, c *call) {
	e.turnLocked(box, turnReading, box.readers+1)
	c.joined = true
	e.calls.push(c)
}

// sharedLocked records that the first reader of box's reading turn has
// its instance, and lets the read-only messages at the head of waiting
// join it (not past a writing one: the order holds). Under mu.
func (e *shardExec) sharedLocked(box *mailbox) {
	box.shared = true
	for len(box.waiting) > 0 && box.waiting[0].ro && box.joinable(box.waiting[0]) {
		c := box.waiting[0]
		box.waiting[0] = nil
		box.waiting = box.waiting[1:]
		c.granted = true
		e.joinLocked(box, c)
		close(c.ready)
	}
}

// turnLocked moves box's turn (see mailbox.move). A refused move is a bug:
// it is logged, and the turn left as it was. Under mu.
func (e *shardExec) turnLocked(box *mailbox, to turnState, readers int) {
	if err := box.move(to, readers); err != nil {
		e.h.log.Error("refused a mailbox turn transition", "shard", e.own.Shard.String(), "err", err)
	}
}

// waitTurn waits until c is handed its entity's turn. It fails, having
// left the queue (or handed on a turn it was just given), when c's context
// ends, the ownership ends or the decision c was admitted under ends.
func (e *shardExec) waitTurn(c *call) error {
	var decDone <-chan struct{}
	if c.dec != nil {
		decDone = c.dec.Done()
	}
	select {
	case <-c.ready:
	case <-c.Done():
	case <-e.ctx.Done():
	case <-decDone:
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.gateLocked(c.dec)
	if err == nil && c.Err() != nil {
		err = e.notStarted(c)
	}
	if !c.granted {
		if err == nil { // cannot happen: woken only by a grant or an end
			err = errors.New("entity: message woken without its turn")
		}
		c.box.waiting = slices.DeleteFunc(c.box.waiting, func(w *call) bool { return w == c })
		e.dropIfIdleLocked(c.box)
		return err
	}
	if err != nil {
		e.leaveTurnLocked(c)
		return err
	}
	return nil
}

// leaveTurnLocked ends c's part of its entity's turn: a reader with others
// still reading leaves them the turn; the last one out, or a writing
// message, hands the turn on. Under mu.
func (e *shardExec) leaveTurnLocked(c *call) {
	e.calls.remove(c)
	box := c.box
	if box.turn == turnReading && box.readers > 1 {
		e.turnLocked(box, turnReading, box.readers-1)
		return
	}
	e.endTurnLocked(box)
}

// endRead is the end of a read-only message's handler (err its error): a
// panic marks the instance for discarding, which the last reader out does
// before it hands the turn on, so that no reader's instance is stopped
// under it. It reports whether the handler panicked.
func (e *shardExec) endRead(c *call, err error) (panicked bool) {
	var p *PanicError
	panicked = errors.As(err, &p)
	box := c.box
	e.mu.Lock()
	if panicked || errors.Is(err, ErrStateFenced) {
		box.discard = true
	}
	if box.readers > 1 {
		e.turnLocked(box, turnReading, box.readers-1)
		e.calls.remove(c)
		in := box.inst
		e.mu.Unlock()
		if in != nil && !panicked {
			e.h.resident.touch(in)
		}
		return panicked
	}
	// The last reader: nobody joins from now on.
	box.shared = false
	discard := box.discard
	box.discard = false
	e.mu.Unlock()
	if discard {
		e.discard(box)
	} else {
		e.afterTurn(box, nil)
	}
	e.mu.Lock()
	e.calls.remove(c)
	e.endTurnLocked(box)
	e.mu.Unlock()
	return panicked
}

// endTurnLocked hands box's turn on: to the first waiting message, unless
// the latest turn was a message's and a task is ready; else to the head
// task (through runnable); else the mailbox is free. Under mu.
func (e *shardExec) endTurnLocked(box *mailbox) {
	taskReady := box.taskReady() && e.ctx.Err() == nil
	if len(box.waiting) > 0 && (!taskReady || !box.lastMsg) {
		c := box.waiting[0]
		box.waiting[0] = nil
		box.waiting = box.waiting[1:]
		c.granted = true
		e.grantLocked(box, c)
		close(c.ready)
		return
	}
	if taskReady {
		e.queueLocked(box)
		e.kick()
		return
	}
	e.turnLocked(box, turnFree, 0)
	e.dropIfIdleLocked(box)
}

// queueLocked puts box in runnable: its head task has the next turn.
func (e *shardExec) queueLocked(box *mailbox) {
	e.turnLocked(box, turnQueued, 0)
	e.runnable = append(e.runnable, unit{box: box})
}

// dropIfIdleLocked forgets a mailbox with nothing in it and no turn.
func (e *shardExec) dropIfIdleLocked(box *mailbox) {
	if box.idle() && e.boxes[box.key] == box {
		delete(e.boxes, box.key)
	}
}

// callList is an intrusive list of the messages holding a turn.
type callList struct {
	head *call
	n    int
}

// push records that c holds its turn from now.
func (l *callList) push(c *call) {
	c.started = time.Now()
	c.prev, c.next = nil, l.head
	if l.head != nil {
		l.head.prev = c
	}
	l.head = c
	l.n++
}

func (l *callList) remove(c *call) {
	if c.prev != nil {
		c.prev.next = c.next
	} else if l.head == c {
		l.head = c.next
	} else {
		return // not in the list
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next = nil, nil
	l.n--
}
