package entity

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// mailbox serialises one entity's tasks, ordered by task id (submission
// order), and its messages, in arrival order, one turn at a time, except
// that read-only messages of a defined type share a turn (see
// turnReading). A task put back for later (waiting for a claim to lapse, a
// retry, a failed store call, an abandoned commit, its object) keeps its
// place: held names it while it waits in the due heap, and the entity's
// later tasks wait for it (messages do not: see turn.go).
//
// A mailbox's fields are guarded by its scheduler's mu; turn changes only
// through move, which refuses what turnTransitions does not list.
// Invariants (check): readers counts the messages sharing a reading turn
// (≥ 1 there, 0 elsewhere); shared and discard are false outside a
// reading turn; a queued mailbox has a pending head task; a message
// waiting for the turn is in waiting until it is handed the turn
// (granted) or leaves.
type mailbox struct {
	key     string
	pending []*item
	turn    turnState
	held    string // id of the head task waiting in the heap; "" if none
	// inst is the resident instance: written under the scheduler's mu,
	// read without it by whoever holds the turn (the call path).
	inst    atomic.Pointer[instance]
	waiting []*call // messages waiting for the turn, first come first
	// lastMsg: the latest turn was a message's, so a waiting task goes
	// before the next waiting message (neither starves the other).
	lastMsg bool
	// readers is the number of read-only messages sharing a reading turn.
	readers int
	// shared: the reading turn's instance is ready (its first reader
	// activated it), so that later readers may join the turn.
	shared bool
	// discard: a reader's handler panicked while others still read; the
	// last reader out discards the instance.
	discard bool
}

// turnState is who holds a mailbox's turn.
type turnState uint8

const (
	// turnFree: nobody holds the turn or is about to: a message arriving
	// takes it at once.
	turnFree turnState = iota
	// turnQueued: the mailbox is in its scheduler's runnable queue: its
	// head task has the next turn and waits for a slot. Messages wait.
	turnQueued
	// turnTask: a task worker holds the turn (its attempt pipeline runs).
	turnTask
	// turnMessage: a writing message (or any message of a type not made
	// by Define, or one whose operation is not ReadOnly) holds the turn
	// alone.
	turnMessage
	// turnReading: readers read-only messages share the turn. The first
	// one activates the instance; once it has (shared), a read-only
	// message arriving joins the turn if nothing waits before it and no
	// task is ready, and the first reader lets the read-only messages at
	// the head of waiting join. A writing message or a task waits for the
	// last reader to leave.
	turnReading

	numTurnStates = iota
)

var turnStateNames = [numTurnStates]string{"free", "queued", "task", "message", "reading"}

func (s turnState) String() string {
	if int(s) < len(turnStateNames) {
		return turnStateNames[s]
	}
	return fmt.Sprintf("turnState(%d)", s)
}

// busy reports whether a task or a message holds the turn.
func (s turnState) busy() bool { return s == turnTask || s == turnMessage || s == turnReading }

// turnTransitions are the moves of a mailbox's turn that the code makes,
// and why. Any other move is a bug, refused by move.
var turnTransitions = []struct {
	from, to turnState
	why      string
}{
	{turnFree, turnQueued, "a task of the entity fell due (dispatch)"},
	{turnFree, turnMessage, "a writing message finds the mailbox free"},
	{turnFree, turnReading, "a read-only message finds the mailbox free"},
	{turnQueued, turnTask, "a slot starts the head task (dispatch)"},
	{turnTask, turnFree, "the task's turn ends, nothing waits"},
	{turnTask, turnQueued, "the task's turn ends, the next task is ready and no message waits"},
	{turnTask, turnMessage, "the task's turn ends: a writing message waited"},
	{turnTask, turnReading, "the task's turn ends: a read-only message waited"},
	{turnMessage, turnFree, "the message's turn ends, nothing waits"},
	{turnMessage, turnQueued, "the message's turn ends: a task is ready, and goes before the next message"},
	{turnMessage, turnMessage, "the message's turn ends: the next writing message waited"},
	{turnMessage, turnReading, "the message's turn ends: a read-only message waited"},
	{turnReading, turnReading, "a reader joins or leaves; or the last one leaves and a read-only message waited"},
	{turnReading, turnFree, "the last reader leaves, nothing waits"},
	{turnReading, turnQueued, "the last reader leaves: a task is ready"},
	{turnReading, turnMessage, "the last reader leaves: a writing message waited"},
}

var turnMoveAllowed = func() (ok [numTurnStates][numTurnStates]bool) {
	for _, t := range turnTransitions {
		ok[t.from][t.to] = true
	}
	return ok
}()

// errTurnTransition is wrapped by every refused move of a turn.
var errTurnTransition = errors.New("entity: illegal mailbox turn transition")

// move changes the turn to to, with readers sharing it (reading only),
// and checks the result. It refuses, changing nothing, a move that
// turnTransitions does not list or whose result breaks the invariants.
// Under the scheduler's mu.
func (b *mailbox) move(to turnState, readers int) error {
	if int(to) >= numTurnStates || !turnMoveAllowed[b.turn][to] {
		return fmt.Errorf("%w: entity %s: %s → %s", errTurnTransition, b.key, b.turn, to)
	}
	if (to == turnReading) != (readers > 0) {
		return fmt.Errorf("%w: entity %s: %s with %d readers", errTurnTransition, b.key, to, readers)
	}
	if to == turnQueued && len(b.pending) == 0 {
		return fmt.Errorf("%w: entity %s: queued without a pending task", errTurnTransition, b.key)
	}
	if to != turnReading {
		b.shared, b.discard = false, false
	}
	b.turn, b.readers = to, readers
	return nil
}

// taskReady reports whether the head task may take the next turn: there
// is one and it does not wait in the heap.
func (b *mailbox) taskReady() bool { return b.held == "" && len(b.pending) > 0 }

// canJoin reports whether the read-only message c may join the reading
// turn now, ahead of nothing: the turn's instance is ready and is c's
// entity's, nothing waits before c, and no task is ready (it would
// starve).
func (b *mailbox) canJoin(c *call) bool { return len(b.waiting) == 0 && b.joinable(c) }

// joinable reports whether the read-only message c may share the reading
// turn, wherever it stands: the turn's instance is ready, not to be
// discarded, and is c's entity's (not a colliding key's), and no task is
// ready.
func (b *mailbox) joinable(c *call) bool {
	in := b.inst.Load()
	return b.turn == turnReading && b.shared && !b.discard && !b.taskReady() &&
		in != nil && in.typ == c.msg.Type && in.id == c.msg.ID
}

// idle reports whether the mailbox holds nothing: no turn, no task, no
// instance, no message waiting.
func (b *mailbox) idle() bool {
	return b.turn == turnFree && len(b.pending) == 0 && b.held == "" && b.inst.Load() == nil && len(b.waiting) == 0
}

// popWaiting takes the first waiting message off b, granted its turn (the
// caller hands it over and closes its ready). b.waiting must not be empty.
func (b *mailbox) popWaiting() *call {
	c := b.waiting[0]
	b.waiting[0] = nil
	b.waiting = b.waiting[1:]
	c.granted = true
	return c
}
