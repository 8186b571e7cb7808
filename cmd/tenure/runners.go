package main

import (
	"context"
	"errors"
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

// checkAgainstRunners runs each live runner's own check of doc on the
// settings it reports, or on its lease TTL when it does not report them
// (runner.CheckAgainstRunners); it returns the refusals and notes on the
// runners it could not check.
func checkAgainstRunners(doc runner.DynamicDoc, runners []liveRunner) (refusals []runner.Refusal, notes []string) {
	return runner.CheckAgainstRunners(doc, liveSettings(runners))
}

// liveSettings is what the config checks know of the live runners.
func liveSettings(runners []liveRunner) []runner.LiveRunner {
	out := make([]runner.LiveRunner, len(runners))
	for i, r := range runners {
		out[i] = runner.LiveRunner{ID: r.ID, Reachable: r.reachable(), Settings: r.state.StaticConfig, Lease: r.lease, LeaseErr: r.leaseErr}
	}
	return out
}

// refusedError is the one line `config set` fails with when live runners
// would refuse the document (runner.RefusedError).
func refusedError(refusals []runner.Refusal) error { return runner.RefusedError(refusals) }
