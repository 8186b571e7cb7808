package entity

import (
	"errors"
	"testing"

	"github.com/tenurehq/tenure/entity/task"
)

// TestTurnMoves: a mailbox's turn moves as turnTransitions lists and
// refuses, unchanged, a move it does not list or one that breaks the
// invariants (readers only while reading; queued only with a task).
func TestTurnMoves(t *testing.T) {
	b := &mailbox{key: "k"}
	refused := func(to turnState, readers int) {
		t.Helper()
		turn, rs := b.turn, b.readers
		if err := b.move(to, readers); !errors.Is(err, errTurnTransition) {
			t.Fatalf("%s → %s with %d readers: %v, want refused", turn, to, readers, err)
		}
		if b.turn != turn || b.readers != rs {
			t.Fatalf("a refused move changed the turn: %s/%d → %s/%d", turn, rs, b.turn, b.readers)
		}
	}
	moved := func(to turnState, readers int) {
		t.Helper()
		if err := b.move(to, readers); err != nil || b.turn != to || b.readers != readers {
			t.Fatalf("→ %s with %d readers: %v (now %s/%d)", to, readers, err, b.turn, b.readers)
		}
	}
	refused(turnTask, 0)    // a task starts only from the runnable queue
	refused(turnQueued, 0)  // nothing pending
	refused(turnReading, 0) // a reading turn has readers
	refused(turnMessage, 1) // only a reading turn has readers
	moved(turnReading, 1)
	b.shared = true
	moved(turnReading, 2)
	refused(turnTask, 0)
	moved(turnMessage, 0)
	if b.shared {
		t.Fatal("shared outlived the reading turn")
	}
	b.pending = []*item{{ptr: task.Pointer{ID: "t1"}}}
	moved(turnQueued, 0)
	refused(turnMessage, 0) // messages wait for a queued task
	moved(turnTask, 0)
	moved(turnFree, 0)
}

// TestStageMoves: an attempt's stage only moves forward, as listed.
func TestStageMoves(t *testing.T) {
	a := &attempt{t: &task.Task{ID: "t1"}}
	if err := a.move(stageDone); err != nil {
		t.Fatalf("claimed → done (a fenced state): %v", err)
	}
	a = &attempt{t: &task.Task{ID: "t2"}}
	for _, to := range []attemptStage{stageRunning, stageCommitting, stageDone} {
		if err := a.move(to); err != nil {
			t.Fatalf("→ %s: %v", to, err)
		}
	}
	if err := a.move(stageRunning); !errors.Is(err, errAttemptTransition) || a.stage != stageDone {
		t.Fatalf("done → running: %v (stage %s), want refused", err, a.stage)
	}
}

// TestPhaseTable: an executor's phase moves only forward, one step at a
// time.
func TestPhaseTable(t *testing.T) {
	for from := range shardPhase(numShardPhases) {
		for to := range shardPhase(numShardPhases) {
			if want := to == from+1; shardPhaseAllowed[from][to] != want {
				t.Errorf("%s → %s allowed: %v, want %v", from, to, shardPhaseAllowed[from][to], want)
			}
		}
	}
}
