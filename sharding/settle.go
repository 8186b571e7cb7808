package sharding

import (
	"time"
)

// A starting runner waits for the membership to settle before its first
// acquisition. Runners started together (a cold start, a deploy that
// starts many at once) register over a spread of a few hundred
// milliseconds to seconds; without the wait, the first to register
// computes an assignment from a view of itself alone, locks every shard,
// and must then hand nearly all of them over, one planned release each,
// as the others appear — work that grows with the number of runners and
// with the shards each join moves. With the wait, every runner acquires
// from the view the last registration made, so each shard is locked once,
// by its final owner.
//
// A runner joining a running cluster (its first view shows shards locked
// by others) does not wait: its shards come from their holders' planned
// releases, which begin as soon as they see it register, and must be
// taken at once.
//
// The wait ends as soon as the runner view has not changed for
// Config.StartupQuiet (a lone runner, or the last of a group, waits that
// long), and in any case Config.StartupSettleMax after the registration:
// a membership that keeps changing (a runner that flaps, a deploy that
// starts runners one after another) delays the first acquisition by at
// most that. The wait is a start-up matter only: a runner that has
// acquired once never waits again (a re-registration after a lost lease
// does not settle: its view is current, and the shards it lost are being
// taken by others that do not wait either). Nothing in it weakens single
// ownership: it only delays lock calls, each of which still goes through
// etcd's transaction.

// settleState is the start-up settle's state, owned by the loop goroutine.
type settleState struct {
	done        bool      // settled: acquisitions go ahead
	registered  time.Time // when the first registration succeeded
	lastChange  time.Time // when the runner view last changed (registered until a view is read)
	viewChanges int       // runner view changes seen during the wait, for the log
}

// settleLeft reports how long the start-up settle still holds the first
// acquisition back, at most: 0 once settled (and from then on). It
// settles when the runner view, read at least once, has been unchanged
// for StartupQuiet, or StartupSettleMax after the registration. The
// loop's settle timer waits what it returns and asks again: a view
// change only moves the end later, and before the first view is read
// the answer is StartupQuiet (or less), so the timer never fires late.
// Loop goroutine only.
func (m *Manager) settleLeft(now time.Time) time.Duration {
	st := &m.settle
	if st.done {
		return 0
	}
	m.mu.Lock()
	viewRead := m.viewRev > 0
	runners := len(m.runners)
	joining := viewRead && m.heldElsewhereLocked()
	m.mu.Unlock()
	left := st.registered.Add(m.cfg.StartupSettleMax).Sub(now)
	if left > 0 && m.cfg.StartupQuiet > 0 && !joining {
		if !viewRead {
			return min(left, m.cfg.StartupQuiet)
		}
		if quiet := st.lastChange.Add(m.cfg.StartupQuiet).Sub(now); quiet > 0 {
			return min(left, quiet)
		}
	}
	st.done = true
	m.log.Info("membership settled; acquiring shards",
		"waited", now.Sub(st.registered), "runners", runners, "view_changes", st.viewChanges,
		"quiet", m.cfg.StartupQuiet, "max", m.cfg.StartupSettleMax)
	return 0
}

// heldElsewhereLocked reports whether the view shows a shard locked by
// another runner: the runner is joining a running cluster, whose runners
// hand it its shards as they see it register. Waiting would leave those
// shards unowned, released by their holders and not yet taken, for the
// quiet period: a join does not settle. Under mu.
func (m *Manager) heldElsewhereLocked() bool {
	for _, r := range m.shards.recs {
		if r.held && r.holder != m.self.ID {
			return true
		}
	}
	return false
}

// runnersChanged records a change of the runner view for the settle.
// Loop goroutine only.
func (m *Manager) runnersChanged(now time.Time) {
	if !m.settle.done {
		m.settle.lastChange = now
		m.settle.viewChanges++
	}
}
