package entity

import (
	"errors"
	"time"

	"github.com/tenurehq/tenure/sharding"
)

// Turns: an entity's tasks and messages share its mailbox and run one at a
// time, read-only messages of a defined type aside (they share a reading
// turn: see turnReading). A message takes the turn at once when the
// mailbox is free (turnFree: a held task waiting in the due heap does not
// block it) and runs on the caller's goroutine; otherwise it waits in the
// mailbox's FIFO. Whoever ends a turn hands it on (endTurnLocked): to the
// first waiting message or to the head task, alternating when both wait,
// so that neither starves the other. A task handed the turn goes through
// runnable and the slots, like any task; a message handed the turn is
// woken. The mailbox's state machine is in mailbox.go; admission (the
// gate) is the messenger's, in deliver.go.

// releasing reports whether an ownership ended with cause by a planned
// release.
func releasing(cause error) bool {
	var lost *sharding.LostError
	return errors.As(cause, &lost) && lost.Reason == sharding.LossReleased
}

// callList is an intrusive list of the messages holding a turn.
type callList struct {
	head *call
	n    int
}

// push records that c holds its turn from now: from c.started, if its
// caller read the clock before taking the lock (a call granted at once),
// else from now.
func (l *callList) push(c *call) {
	if c.started.IsZero() {
		c.started = time.Now()
	}
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

// takeTurnLocked gives c its entity's turn if the mailbox is free (or c
// is read-only and may join the readers holding it), or queues c behind
// the turn; it reports whether c holds the turn. Under mu.
func (s *scheduler) takeTurnLocked(c *call, key string) bool {
	box := s.boxes[key]
	if box == nil {
		box = &mailbox{key: key}
		s.boxes[key] = box
	}
	c.box = box
	switch {
	case box.turn == turnFree:
		s.grantLocked(box, c)
		return true
	case c.ro && box.canJoin(c):
		s.joinLocked(box, c)
		return true
	}
	c.ready = make(chan struct{})
	box.waiting = append(box.waiting, c)
	return false
}

// grantLocked gives c the turn of box, which is free or being handed on:
// alone for a writing message, as the first reader for a read-only one.
// Under mu.
func (s *scheduler) grantLocked(box *mailbox, c *call) {
	to, readers := turnMessage, 0
	if c.ro {
		to, readers = turnReading, 1
	}
	s.turnLocked(box, to, readers)
	box.shared = false // a new reading turn: its first reader activates
	box.lastMsg = true
	s.calls.push(c)
}

// joinLocked lets the read-only message c share the reading turn of box,
// on the instance its first reader activated. Under mu.
func (s *scheduler) joinLocked(box *mailbox, c *call) {
	s.turnLocked(box, turnReading, box.readers+1)
	c.joined = true
	s.calls.push(c)
}

// sharedLocked records that the first reader of box's reading turn has
// its instance, and lets the read-only messages at the head of waiting
// join it (not past a writing one: the order holds). Under mu.
func (s *scheduler) sharedLocked(box *mailbox) {
	box.shared = true
	for len(box.waiting) > 0 && box.waiting[0].ro && box.joinable(box.waiting[0]) {
		c := box.popWaiting()
		s.joinLocked(box, c)
		close(c.ready)
	}
}

// turnLocked moves box's turn (see mailbox.move). A refused move is a bug:
// it is logged, and the turn left as it was. Under mu.
func (s *scheduler) turnLocked(box *mailbox, to turnState, readers int) {
	if err := box.move(to, readers); err != nil {
		s.h.log.Error("refused a mailbox turn transition", "shard", s.own.Shard.String(), "err", err)
	}
}

// leaveTurnLocked ends the turn of c, a writing message, and hands it on
// (a reader leaves through messenger.endRead). Under mu.
func (s *scheduler) leaveTurnLocked(c *call) {
	s.calls.remove(c)
	s.endTurnLocked(c.box)
}

// endTurnLocked hands box's turn on: to the first waiting message, unless
// the latest turn was a message's and a task is ready; else to the head
// task (through runnable); else the mailbox is free. Under mu.
func (s *scheduler) endTurnLocked(box *mailbox) {
	taskReady := box.taskReady() && s.ctx.Err() == nil
	if len(box.waiting) > 0 && (!taskReady || !box.lastMsg) {
		c := box.popWaiting()
		s.grantLocked(box, c)
		close(c.ready)
		return
	}
	if taskReady {
		s.queueLocked(box)
		s.kick()
		return
	}
	s.turnLocked(box, turnFree, 0)
	s.dropIfIdleLocked(box)
}

// queueLocked puts box in runnable: its head task has the next turn.
func (s *scheduler) queueLocked(box *mailbox) {
	s.turnLocked(box, turnQueued, 0)
	s.runnable = append(s.runnable, unit{box: box})
}

// dropIfIdleLocked forgets a mailbox with nothing in it and no turn.
func (s *scheduler) dropIfIdleLocked(box *mailbox) {
	if box.idle() && s.boxes[box.key] == box {
		delete(s.boxes, box.key)
	}
}
