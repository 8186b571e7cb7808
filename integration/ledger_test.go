package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv/poll"
	"github.com/tenurehq/tenure/storage"
)

// ledger records every Submit of a load under the id the load chose for
// it, so that none drops out of the accounting. A Submit that returned an
// error is ambiguous — the task may exist (the write happened, its answer
// was lost) or not — and is resolved, once the faults have healed, by
// reading the task by its ref: a task that exists must run to a terminal
// state and complete at most once like any other; one that does not
// exist was not accepted.
type ledger struct {
	group  string
	shards int

	mu   sync.Mutex
	subs []*submission
}

// submission is one Submit.
type submission struct {
	ref       string
	ambiguous bool   // Submit returned an error
	err       string // its error
	resolved  bool   // ambiguous and read back since
	exists    bool   // accepted: Submit succeeded, or the task was found
}

func newLedger(shards int) *ledger {
	return &ledger{group: storage.DefaultGroup, shards: shards}
}

// submit submits req under a caller-given id (a new one unless req has
// one) and records the outcome. It returns the error of Submit.
func (l *ledger) submit(ctx context.Context, client *task.Client, req task.SubmitRequest) error {
	if req.ID == "" {
		req.ID = task.NewID()
	}
	ref := task.Ref(task.ShardOf(l.group, l.shards, req.Type, req.Entity, req.ID), req.ID)
	s := &submission{ref: ref}
	tk, _, err := client.Submit(ctx, req)
	switch {
	case err != nil:
		s.ambiguous, s.err = true, err.Error()
	case tk.Ref() != ref:
		// The ledger's placement must be the client's, or every
		// resolution would read the wrong key.
		s.ambiguous, s.err = true, fmt.Sprintf("submitted as %s, expected %s", tk.Ref(), ref)
	default:
		s.exists = true
	}
	l.mu.Lock()
	l.subs = append(l.subs, s)
	l.mu.Unlock()
	return err
}

// resolve reads every unresolved ambiguous submission's task by its ref.
// A read that fails for another reason than "not found" is retried until
// within ends; then resolve returns an error naming the ref.
func (l *ledger) resolve(ctx context.Context, client *task.Client, within time.Duration) error {
	l.mu.Lock()
	var todo []*submission
	for _, s := range l.subs {
		if s.ambiguous && !s.resolved {
			todo = append(todo, s)
		}
	}
	l.mu.Unlock()
	deadline := time.Now().Add(within)
	for _, s := range todo {
		var err error
		// Read again every 200 ms until the task is found or not found.
		if perr := poll.Until(ctx, time.Until(deadline), 200*time.Millisecond, func() (bool, string, error) {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = client.Get(rctx, s.ref)
			cancel()
			return err == nil || errors.Is(err, task.ErrNotFound), "", nil
		}); perr != nil {
			return fmt.Errorf("ambiguous submit %s (%s) not resolved: %w", s.ref, s.err, err)
		}
		l.mu.Lock()
		s.resolved, s.exists = true, err == nil
		l.mu.Unlock()
	}
	return nil
}

// ledgerCounts summarise a ledger.
type ledgerCounts struct {
	submits, clean, ambiguous, existed, notAccepted, unresolved int
}

func (l *ledger) counts() ledgerCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	var c ledgerCounts
	for _, s := range l.subs {
		c.submits++
		switch {
		case !s.ambiguous:
			c.clean++
		case !s.resolved:
			c.ambiguous++
			c.unresolved++
		case s.exists:
			c.ambiguous++
			c.existed++
		default:
			c.ambiguous++
			c.notAccepted++
		}
	}
	return c
}

// accepted returns the refs of the tasks that exist: clean submits and
// ambiguous ones found; rejected those of the ambiguous ones resolved as
// absent. Unresolved ones are in neither.
func (l *ledger) accepted() (accepted, rejected []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.subs {
		switch {
		case s.exists:
			accepted = append(accepted, s.ref)
		case s.resolved:
			rejected = append(rejected, s.ref)
		}
	}
	return accepted, rejected
}

// clean returns the refs of the submits that returned no error: the
// accounting before the ledger, which dropped every ambiguous one.
func (l *ledger) clean() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.subs {
		if !s.ambiguous {
			out = append(out, s.ref)
		}
	}
	return out
}

// submitEvery submits the request next(i, rnd) every interval until ctx
// ends, each under an id the ledger records and a 10 s bound; a submit
// whose outcome is unknown is logged and resolved at the end. It returns
// a channel closed when the loop has stopped.
func (l *ledger) submitEvery(ctx context.Context, t testing.TB, client *task.Client, interval time.Duration, seed uint64,
	next func(i int, rnd *rand.Rand) task.SubmitRequest) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		rnd := rand.New(rand.NewPCG(seed, seed+1))
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := l.submit(sctx, client, next(i, rnd))
			cancel()
			if err != nil {
				t.Logf("submit (outcome unknown, resolved at the end): %v", err)
			}
		}
	}()
	return done
}
