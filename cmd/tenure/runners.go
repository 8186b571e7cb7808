package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

// liveRunner is a live runner as status and config see it: its
// registration, its admin endpoint's answer (or why there was none) and,
// when it did not answer, what etcd says of its lease. A runner killed
// with SIGKILL keeps its registration and shard locks until its lease
// ends: it is live to etcd, unreachable to us.
type liveRunner struct {
	storage.RunnerInfo
	state    runnerState
	adminErr error              // why its admin endpoint did not answer; nil when it did
	lease    *storage.LeaseTime // its lease, when adminErr is set and etcd answered
	leaseErr error              // why the lease read failed (storage.ErrNotFound: the lease has ended)
}

// reachable reports whether its admin endpoint answered.
func (r *liveRunner) reachable() bool { return r.adminErr == nil }

// leaseLeft is the most time its lease has left: the bound etcd gave, 0
// once it has ended; ok is false when unknown (reachable, or the read
// failed otherwise).
func (r *liveRunner) leaseLeft() (left time.Duration, ok bool) {
	switch {
	case r.lease != nil:
		return r.lease.Remaining, true
	case errors.Is(r.leaseErr, storage.ErrNotFound):
		return 0, true
	}
	return 0, false
}

// leaseReads bounds the lease reads gatherRunners makes at once: a cluster
// of many unreachable runners (a partition between the CLI and them)
// should not open as many etcd requests together.
const leaseReads = 16

// gatherRunners asks every runner's admin endpoint at once and, for each
// that does not answer, etcd for its lease's time left. The result is
// sorted by id.
func gatherRunners(ctx context.Context, adm *admin, leases storage.LeaseReader, runners []storage.RunnerInfo) []liveRunner {
	runners = slices.Clone(runners)
	slices.SortFunc(runners, func(a, b storage.RunnerInfo) int { return strings.Compare(a.ID, b.ID) })
	states, errs := adm.runnerStates(ctx, runners)
	out := make([]liveRunner, len(runners))
	sem := make(chan struct{}, leaseReads)
	var wg sync.WaitGroup
	for i, r := range runners {
		out[i] = liveRunner{RunnerInfo: r, state: states[i], adminErr: errs[i]}
		if errs[i] == nil || leases == nil {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			lt, err := leases.LeaseTimeToLive(ctx, r.LeaseID)
			if err != nil {
				out[i].leaseErr = err
				return
			}
			out[i].lease = &lt
		})
	}
	wg.Wait()
	return out
}

// refusal is a live runner's refusal of a dynamic config document, as
// `config set` predicts it before writing.
type refusal struct {
	err     error  // the *runner.DynamicRefusal
	assumed string // how its settings were assumed, when it did not report them
}

// checkAgainstRunners runs each live runner's own check of doc
// (runner.DynamicDoc.ApplyTo) on the settings it reports, or, for a
// runner that does not report them (unreachable, or older), on its lease
// TTL as etcd granted it with the settings that follow from it. It returns
// the refusals, by runner id, and notes on the runners it could not check.
func checkAgainstRunners(doc runner.DynamicDoc, runners []liveRunner) (refusals []refusal, notes []string) {
	for _, r := range runners {
		settings, assumed := r.state.StaticConfig, ""
		if !r.reachable() || len(settings) == 0 {
			why := "did not report its settings"
			if !r.reachable() {
				why = "did not answer"
			}
			switch {
			case r.lease != nil:
				settings = map[string]string{"lease.ttl": r.lease.Granted.String()}
				assumed = fmt.Sprintf("runner %s %s: checked against its lease TTL %s with the keep-alive settings that follow from it", r.ID, why, r.lease.Granted)
			case errors.Is(r.leaseErr, storage.ErrNotFound):
				continue // its lease has ended: it is gone
			default:
				notes = append(notes, fmt.Sprintf("runner %s %s and its lease could not be read (%v): not checked; it checks the document itself", r.ID, why, r.leaseErr))
				continue
			}
		}
		target, err := runner.DynamicTargetFrom(r.ID, settings)
		if err != nil {
			notes = append(notes, fmt.Sprintf("runner %s reports settings that do not parse (%v): not checked", r.ID, err))
			continue
		}
		if _, _, err := doc.ApplyTo(target); err != nil {
			refusals = append(refusals, refusal{err: err, assumed: assumed})
		}
	}
	return refusals, notes
}

// refusedError is the one line `config set` fails with when live runners
// would refuse the document: the first refusal in full, and the other
// runners that refuse it too.
func refusedError(refusals []refusal) error {
	first := refusals[0]
	msg := "refused, nothing written: " + flatten(first.err).Error()
	if first.assumed != "" {
		msg += " [" + first.assumed + "]"
	}
	if n := len(refusals) - 1; n > 0 {
		var others []string
		for _, r := range refusals[1:] {
			var dr *runner.DynamicRefusal
			if errors.As(r.err, &dr) {
				others = append(others, dr.RunnerID)
			}
		}
		msg += fmt.Sprintf(" (%d other runner(s) refuse it too: %s)", n, strings.Join(others, ", "))
	}
	return &refusedErr{msg: msg, err: first.err}
}

// refusedErr keeps the refusal for errors.As while its message is the
// summary.
type refusedErr struct {
	msg string
	err error
}

func (e *refusedErr) Error() string { return e.msg }
func (e *refusedErr) Unwrap() error { return e.err }
