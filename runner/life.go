package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tenurehq/tenure/storage"
)

// ErrStopped reports a runner that has stopped (or failed to start): its
// connections are closed, so the clients sharing them (Runner.Client) no
// longer work.
var ErrStopped = errors.New("runner: stopped")

// ErrRunAgain reports a second call of Run: a runner runs once; make a new
// one with New to run again.
var ErrRunAgain = errors.New("runner: Run called again; a runner runs once")

// life is how far Run has gone, for the clients that share the runner's
// connections. Its states only move forward:
//
//	new --begin--> running --connected--> connected --end--> stopped
//	                  \___________________end_____________/
//
// Invariants: connected (its channel closed) implies meta is the stored
// cluster meta and the runner's stores are open; stopped (its channel
// closed) is reached before Run closes the stores, so a client that sees
// the runner not stopped at a call's start uses open stores unless Run
// stops meanwhile.
type life struct {
	ready   chan struct{} // closed by connected
	serving chan struct{} // closed by up: registered, calls served
	done    chan struct{} // closed by end

	mu   sync.Mutex
	ran  bool
	meta storage.ClusterMeta
	err  error // Run's error
}

func newLife() life {
	return life{ready: make(chan struct{}), serving: make(chan struct{}), done: make(chan struct{})}
}

// begin moves new to running; it reports false if Run was called before.
func (l *life) begin() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ran {
		return false
	}
	l.ran = true
	return true
}

// connected records the cluster meta once Run has connected and checked it.
func (l *life) connected(meta storage.ClusterMeta) {
	l.mu.Lock()
	l.meta = meta
	l.mu.Unlock()
	close(l.ready)
}

// up records that Run has registered the runner and serves calls: its
// client calls entities (Serve waits for it).
func (l *life) up() { close(l.serving) }

// end records Run's result; Run calls it once, last, before closing its
// stores.
func (l *life) end(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
	close(l.done)
}

// stopped returns ErrStopped (with Run's error, if it failed) once Run has
// ended, else nil.
func (l *life) stopped(runnerID string) error {
	select {
	case <-l.done:
	default:
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return fmt.Errorf("runner %s: %w: %w", runnerID, ErrStopped, l.err)
	}
	return fmt.Errorf("runner %s: %w", runnerID, ErrStopped)
}

// wait returns the cluster meta once Run has connected, ErrStopped if it
// ends first, or the end of ctx.
func (l *life) wait(ctx context.Context, runnerID string) (storage.ClusterMeta, error) {
	select {
	case <-l.ready:
	case <-l.done:
	case <-ctx.Done():
		return storage.ClusterMeta{}, fmt.Errorf("runner %s: waiting for Run to connect: %w", runnerID, context.Cause(ctx))
	}
	if err := l.stopped(runnerID); err != nil {
		return storage.ClusterMeta{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.meta, nil
}
