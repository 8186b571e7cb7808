package sharding

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// A Manager keeps one record per shard it has anything to say about
// (shardTable). A record has two sides that change for different reasons:
//
//   - ours: what this runner's own lock on the shard is doing (shardState),
//     changed by the loop's lock calls and by the detachment machine's
//     transitions, only through shardTable.move;
//   - observed: the lock as the membership stream shows it, whoever holds
//     it (held, holder, freedBy), changed only by the view (membership.go).
//
// The two sides are related only loosely, on purpose: the stream lags our
// lock calls (an acquired shard is Owned before the stream shows us as its
// holder; a released one is Free before the stream shows the delete), so no
// invariant ties our state to the observed holder. What they share is the
// shard and the lock: a lock seen deleted ends a Suspended belief
// (freeLocked), and a delete of a lock we own is settled by absorb.

// shardState is what this runner's own lock on a shard is doing.
type shardState uint8

const (
	// shardFree: we hold no lock on the shard that we know of and are not
	// waiting for it. A record in this state exists only for what the
	// membership stream shows of the shard.
	shardFree shardState = iota
	// shardPending: the assignment gives us the shard but another runner
	// holds its lock; it is taken at once when the stream shows the lock
	// deleted. While the view shows the lock free it is retried, as long
	// as its retry window is open (acquire.go, polledLocked).
	shardPending
	// shardOwned: our lease holds the lock and we are attached: the
	// shard's entities run under own.Ctx.
	shardOwned
	// shardReleasing: a planned release (rebalance, drain) is handing the
	// shard over: own.Ctx is cancelled, the handler requeues its work while
	// our lock still holds, then the lock is deleted. Only release, in the
	// loop goroutine, puts a shard here and takes it out.
	shardReleasing
	// shardSuspended: our lease is believed to still hold the lock but
	// nothing runs: we detached while owning it, acquired it just as the
	// attachment ended, or failed to delete it on a release. It is
	// re-verified against etcd before it is owned again.
	shardSuspended

	numShardStates = iota
)

var shardStateNames = [numShardStates]string{"free", "pending", "owned", "releasing", "suspended"}

func (s shardState) String() string {
	if int(s) < len(shardStateNames) {
		return shardStateNames[s]
	}
	return fmt.Sprintf("shardState(%d)", s)
}

// shardTransitions are the moves of our side of a shard that the code
// makes, and why. Any other move is a bug. A move to the same state
// replaces the state's data (a new retry window, a new epoch).
var shardTransitions = []struct {
	from, to shardState
	why      string
}{
	{shardFree, shardPending, "acquire: held elsewhere"},
	{shardFree, shardOwned, "acquire: locked while attached"},
	{shardFree, shardSuspended, "acquire: locked, but the attachment ended meanwhile"},
	{shardPending, shardPending, "acquire: still held elsewhere (a new window, or the holder a retry saw); its window ran out (only a polled shard's: one the view shows free)"},
	{shardPending, shardOwned, "acquire: locked while attached"},
	{shardPending, shardSuspended, "acquire: locked, but the attachment ended meanwhile"},
	{shardPending, shardFree, "no longer assigned to us; the lease is lost; the manager stops"},
	{shardOwned, shardReleasing, "rebalance or drain hands it over"},
	{shardOwned, shardSuspended, "detached: the lock is kept for re-verification"},
	{shardOwned, shardFree, "the lock is lost (verification or the membership stream)"},
	{shardReleasing, shardFree, "the lock is deleted (or was not ours any more)"},
	{shardReleasing, shardSuspended, "deleting the lock failed: it stays held by our lease"},
	{shardSuspended, shardOwned, "re-verified (or re-acquired by our lease) while attached"},
	{shardSuspended, shardSuspended, "re-verified or re-acquired, but the attachment ended again"},
	{shardSuspended, shardPending, "acquire: held elsewhere, so our lock is gone"},
	{shardSuspended, shardFree, "re-verification failed; the lock is seen deleted or missing from a listing; released as a stray (stray.go); the lease is lost; the manager stops"},
}

var shardMoveAllowed = func() (ok [numShardStates][numShardStates]bool) {
	for _, t := range shardTransitions {
		ok[t.from][t.to] = true
	}
	return ok
}()

// errShardTransition is wrapped by every refused move: a move the table
// does not allow, or a record that breaks its state's invariant.
var errShardTransition = errors.New("sharding: illegal shard state transition")

// retryWindow is the retry state of a Pending shard.
type retryWindow struct {
	since     time.Time // when the current retry window opened
	waiting   time.Time // when the shard became Pending (kept across windows)
	holder    string    // the holder the last try found
	exhausted bool      // the window ran out and was reported
}

// ours is our side of a shard's record: the state and the data only that
// state has.
type ours struct {
	state shardState
	epoch int64       // our lock's epoch (fencing token): Owned, Releasing, Suspended
	own   *owned      // the ownership: Owned (live), Releasing (being handed over)
	retry retryWindow // Pending
}

// Constructors of the target of a move, one per state.
func free() ours                   { return ours{} }
func pendingIn(w retryWindow) ours { return ours{state: shardPending, retry: w} }
func ownedAs(o *owned) ours        { return ours{state: shardOwned, epoch: o.Epoch, own: o} }
func releasingOf(o *owned) ours    { return ours{state: shardReleasing, epoch: o.Epoch, own: o} }
func suspendedAt(epoch int64) ours { return ours{state: shardSuspended, epoch: epoch} }

// check reports whether o has exactly the data of its state:
//   - Free: nothing;
//   - Pending: a retry window (opened at since), no lock;
//   - Owned, Releasing: an ownership whose epoch is the record's, > 0;
//   - Suspended: an epoch > 0 and no ownership (nothing runs).
func (o ours) check() error {
	noRetry := o.retry == retryWindow{}
	switch o.state {
	case shardFree:
		if o.epoch != 0 || o.own != nil || !noRetry {
			return fmt.Errorf("%w: free with data (epoch %d, ownership %v, retry %v)", errShardTransition, o.epoch, o.own != nil, !noRetry)
		}
	case shardPending:
		if o.epoch != 0 || o.own != nil || o.retry.since.IsZero() {
			return fmt.Errorf("%w: pending needs a retry window and no lock (epoch %d, ownership %v)", errShardTransition, o.epoch, o.own != nil)
		}
	case shardOwned, shardReleasing:
		if o.own == nil || o.epoch <= 0 || o.own.Epoch != o.epoch || !noRetry {
			return fmt.Errorf("%w: %s needs an ownership of epoch %d > 0 and no retry window", errShardTransition, o.state, o.epoch)
		}
	case shardSuspended:
		if o.epoch <= 0 || o.own != nil || !noRetry {
			return fmt.Errorf("%w: suspended needs an epoch > 0 (%d), no ownership and no retry window", errShardTransition, o.epoch)
		}
	default:
		return fmt.Errorf("%w: unknown state %d", errShardTransition, o.state)
	}
	return nil
}

// shardRecord is what the manager knows of one shard.
type shardRecord struct {
	ours
	// held: the membership view shows a lock on the shard; holder is its
	// runner id (empty for a record that names none).
	held   bool
	holder string
	// freedBy is the runner that held the lock when the view saw it go,
	// until the shard is locked again (see freedByLeavingLocked).
	freedBy string
}

// check reports whether r keeps the record invariants: ours is well formed
// (ours.check); a holder is named only while held; a shard is freedBy a
// runner only while no lock is held.
func (r shardRecord) check() error {
	if err := r.ours.check(); err != nil {
		return err
	}
	if !r.held && r.holder != "" {
		return fmt.Errorf("%w: holder %q while no lock is held", errShardTransition, r.holder)
	}
	if r.held && r.freedBy != "" {
		return fmt.Errorf("%w: freed by %q while a lock is held", errShardTransition, r.freedBy)
	}
	return nil
}

func (r shardRecord) empty() bool { return r.state == shardFree && !r.held && r.freedBy == "" }

// shardTable holds the shard records of a Manager, under its mu. A shard
// without a record is Free with nothing observed; a record that becomes so
// is dropped, so the table holds the shards locked in the view and ours.
//
// Invariants, after every call (check verifies them):
//   - every record satisfies shardRecord.check and none is empty;
//   - counts[s] is the number of records in state s, for every state but
//     Free (not counted: most Free shards have no record).
type shardTable struct {
	recs   map[storage.ShardID]*shardRecord
	counts [numShardStates]int
}

func newShardTable() shardTable {
	return shardTable{recs: map[storage.ShardID]*shardRecord{}}
}

// get returns s's record (the zero record if it has none).
func (t *shardTable) get(s storage.ShardID) shardRecord {
	if r, ok := t.recs[s]; ok {
		return *r
	}
	return shardRecord{}
}

// move is the one function that changes our side of a shard: it moves s to
// the state of to, with to's data, if shardTransitions allows the move and
// to is well formed; otherwise it changes nothing and returns an error
// wrapping errShardTransition.
func (t *shardTable) move(s storage.ShardID, to ours) error {
	r := t.get(s)
	if int(to.state) >= numShardStates || !shardMoveAllowed[r.state][to.state] {
		return fmt.Errorf("%w: shard %s: %s → %s", errShardTransition, s, r.state, to.state)
	}
	if err := to.check(); err != nil {
		return fmt.Errorf("shard %s: %s → %s: %w", s, r.state, to.state, err)
	}
	if r.state != shardFree {
		t.counts[r.state]--
	}
	if to.state != shardFree {
		t.counts[to.state]++
	}
	r.ours = to
	t.put(s, r)
	return nil
}

// observeHeld records that the view shows s locked by holder: the shard is
// no longer freed by anyone.
func (t *shardTable) observeHeld(s storage.ShardID, holder string) {
	r := t.get(s)
	r.held, r.holder, r.freedBy = true, holder, ""
	t.put(s, r)
}

// observeFreed records that the view shows s's lock gone, remembering its
// holder, if it named one, as the runner that freed it.
func (t *shardTable) observeFreed(s storage.ShardID) {
	r := t.get(s)
	if r.holder != "" {
		r.freedBy = r.holder
	}
	r.held, r.holder = false, ""
	t.put(s, r)
}

func (t *shardTable) put(s storage.ShardID, r shardRecord) {
	if r.empty() {
		delete(t.recs, s)
		return
	}
	if p, ok := t.recs[s]; ok {
		*p = r
		return
	}
	t.recs[s] = &r
}

// count returns how many shards are in state st (not Free).
func (t *shardTable) count(st shardState) int { return t.counts[st] }

// inState returns, sorted, the shards in state st.
func (t *shardTable) inState(st shardState) []storage.ShardID {
	if t.counts[st] == 0 {
		return nil
	}
	out := make([]storage.ShardID, 0, t.counts[st])
	for s, r := range t.recs {
		if r.state == st {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, cmpShard)
	return out
}

// all yields every record, in no particular order. The table must not
// change during the iteration.
func (t *shardTable) all() iter.Seq2[storage.ShardID, shardRecord] {
	return func(yield func(storage.ShardID, shardRecord) bool) {
		for s, r := range t.recs {
			if !yield(s, *r) {
				return
			}
		}
	}
}

// holders returns the view's lock holders (shard → runner id), the
// current owners the assignment keeps shards with.
func (t *shardTable) holders() placement.Assignment {
	out := make(placement.Assignment, len(t.recs))
	for s, r := range t.recs {
		if r.held {
			out[s] = r.holder
		}
	}
	return out
}

// check verifies the table's invariants.
func (t *shardTable) check() error {
	var counts [numShardStates]int
	for s, r := range t.recs {
		if r.empty() {
			return fmt.Errorf("%w: shard %s: an empty record is kept", errShardTransition, s)
		}
		if err := r.check(); err != nil {
			return fmt.Errorf("shard %s: %w", s, err)
		}
		counts[r.state]++
	}
	counts[shardFree] = 0
	if counts != t.counts {
		return fmt.Errorf("%w: state counts %v, records say %v", errShardTransition, t.counts, counts)
	}
	return nil
}

// The manager adds invariants that tie the table to its attachment and its
// assignment, under mu (checkShardsLocked verifies them, and moveLocked
// refuses a move that would break one):
//   - a shard is Owned only while the manager is attached, and its context
//     derives from the attachment context of generation gen: a detachment
//     moves every Owned shard to Suspended under the lock that clears
//     attached (onTransition);
//   - a shard is Pending only while the assignment gives it to us:
//     recomputeLocked and acquireWanted free the others;
//   - at most releaseParallel shards are Releasing: the loop releases
//     that many at a time (releaseAll).

// moveLocked moves s to the state of to through shardTable.move, once the
// manager's invariants allow it, and keeps the owned gauge. A refused move
// is a bug: it is logged at error level and counted (the tests fail on
// any), and s stays as it was. Under mu.
func (m *Manager) moveLocked(s storage.ShardID, to ours) bool {
	err := m.admitLocked(s, to.state)
	if err == nil {
		err = m.shards.move(s, to)
	}
	if err != nil {
		m.badMoves.Add(1)
		m.log.Error("refused a shard state change that breaks the manager's invariants (a bug)", "shard", s.String(), "err", err)
		return false
	}
	m.metrics.owned.Set(float64(m.shards.count(shardOwned)))
	return true
}

// admitLocked checks the manager's invariants for a move of s to state to.
func (m *Manager) admitLocked(s storage.ShardID, to shardState) error {
	switch {
	case to == shardOwned && !m.attached:
		return fmt.Errorf("%w: shard %s: owned while detached", errShardTransition, s)
	case to == shardPending && m.assignment[s] != m.self.ID:
		return fmt.Errorf("%w: shard %s: pending while the assignment gives it to %q", errShardTransition, s, m.assignment[s])
	case to == shardReleasing && m.shards.count(shardReleasing) >= releaseParallel:
		return fmt.Errorf("%w: shard %s: more than %d releases at once", errShardTransition, s, releaseParallel)
	}
	return nil
}

// checkShardsLocked verifies the table's invariants and the manager's.
// Under mu.
func (m *Manager) checkShardsLocked() error {
	if err := m.shards.check(); err != nil {
		return err
	}
	if n := m.shards.count(shardOwned); n > 0 && !m.attached {
		return fmt.Errorf("%w: %d shards owned while detached", errShardTransition, n)
	}
	for _, s := range m.shards.inState(shardPending) {
		if m.assignment[s] != m.self.ID {
			return fmt.Errorf("%w: shard %s pending while the assignment gives it to %q", errShardTransition, s, m.assignment[s])
		}
	}
	if n := m.shards.count(shardReleasing); n > releaseParallel {
		return fmt.Errorf("%w: %d shards releasing at once, more than %d", errShardTransition, n, releaseParallel)
	}
	return nil
}

// forgetLocked frees every Pending and Suspended shard: the lease their
// locks and retries were bound to is gone, or about to be revoked. Under
// mu.
func (m *Manager) forgetLocked() {
	for _, st := range []shardState{shardPending, shardSuspended} {
		for _, s := range m.shards.inState(st) {
			m.moveLocked(s, free())
		}
	}
}
