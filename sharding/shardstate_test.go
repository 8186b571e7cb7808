package sharding

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

var allShardStates = []shardState{shardFree, shardPending, shardOwned, shardReleasing, shardSuspended}

// wellFormed returns a well-formed target of state st for shard s.
func wellFormed(s storage.ShardID, st shardState, epoch int64) ours {
	o := &owned{Ownership: Ownership{Shard: s, Epoch: epoch}}
	switch st {
	case shardPending:
		return pendingIn(retryWindow{since: time.Unix(1, 0).Add(time.Duration(epoch))})
	case shardOwned:
		return ownedAs(o)
	case shardReleasing:
		return releasingOf(o)
	case shardSuspended:
		return suspendedAt(epoch)
	}
	return free()
}

// pathTo lists the moves from Free that put a shard in state st.
func pathTo(st shardState) []shardState {
	switch st {
	case shardFree:
		return nil
	case shardReleasing:
		return []shardState{shardOwned, shardReleasing}
	}
	return []shardState{st}
}

// TestShardTransitions: every move the table allows works and leaves the
// table's invariants true; every other move (all of them: there are only
// 25 pairs) is refused with errShardTransition and changes nothing.
func TestShardTransitions(t *testing.T) {
	s := storage.ShardID{Group: storage.DefaultGroup, Index: 3}
	seen := map[[2]shardState]bool{}
	for _, tr := range shardTransitions {
		k := [2]shardState{tr.from, tr.to}
		if seen[k] {
			t.Errorf("transition %s → %s listed twice", tr.from, tr.to)
		}
		seen[k] = true
	}
	// Moves that would be bugs, whatever the table says: running a shard
	// without acquiring or re-verifying its lock, releasing a lock we do
	// not own, or keeping a lock past the release of its ownership.
	for _, k := range [][2]shardState{
		{shardFree, shardFree}, {shardFree, shardReleasing}, {shardPending, shardReleasing},
		{shardOwned, shardOwned}, {shardOwned, shardPending}, {shardReleasing, shardOwned},
		{shardReleasing, shardPending}, {shardReleasing, shardReleasing}, {shardSuspended, shardReleasing},
	} {
		if shardMoveAllowed[k[0]][k[1]] {
			t.Errorf("%s → %s is allowed", k[0], k[1])
		}
	}
	allowed := 0
	for _, from := range allShardStates {
		for _, to := range allShardStates {
			tab := newShardTable()
			tab.observeHeld(s, "other") // the observed side rides along untouched
			for i, st := range pathTo(from) {
				if err := tab.move(s, wellFormed(s, st, 5)); err != nil {
					t.Fatalf("reaching %s (step %d): %v", from, i, err)
				}
			}
			before := tab.get(s)
			err := tab.move(s, wellFormed(s, to, 9))
			if shardMoveAllowed[from][to] {
				allowed++
				if err != nil {
					t.Errorf("%s → %s: allowed, but refused: %v", from, to, err)
				} else if got := tab.get(s); got.state != to || got.epoch != wellFormed(s, to, 9).epoch || !got.held || got.holder != "other" {
					t.Errorf("%s → %s: record after the move: %+v", from, to, got)
				}
			} else {
				if !errors.Is(err, errShardTransition) {
					t.Errorf("%s → %s: not allowed, got err %v", from, to, err)
				}
				if got := tab.get(s); got != before {
					t.Errorf("%s → %s: a refused move changed the record: %+v, was %+v", from, to, got, before)
				}
			}
			if err := tab.check(); err != nil {
				t.Errorf("%s → %s: %v", from, to, err)
			}
		}
	}
	if allowed != len(shardTransitions) {
		t.Errorf("%d moves allowed, the table lists %d", allowed, len(shardTransitions))
	}
}

// TestShardTransitionMalformed: an allowed move to a record without its
// state's data (or with another state's) is refused.
func TestShardTransitionMalformed(t *testing.T) {
	s := storage.ShardID{Group: storage.DefaultGroup, Index: 0}
	o := &owned{Ownership: Ownership{Shard: s, Epoch: 4}}
	for name, tc := range map[string]struct {
		from shardState
		to   ours
	}{
		"owned without ownership":     {shardFree, ours{state: shardOwned, epoch: 4}},
		"owned, epochs differ":        {shardFree, ours{state: shardOwned, epoch: 5, own: o}},
		"owned with a retry window":   {shardPending, ours{state: shardOwned, epoch: 4, own: o, retry: retryWindow{since: time.Now()}}},
		"suspended at epoch 0":        {shardFree, suspendedAt(0)},
		"suspended with ownership":    {shardOwned, ours{state: shardSuspended, epoch: 4, own: o}},
		"pending without window":      {shardFree, pendingIn(retryWindow{})},
		"pending with a lock":         {shardFree, ours{state: shardPending, epoch: 4, retry: retryWindow{since: time.Now()}}},
		"free with an epoch":          {shardSuspended, ours{epoch: 4}},
		"releasing without ownership": {shardOwned, ours{state: shardReleasing, epoch: 4}},
		"unknown state":               {shardFree, ours{state: numShardStates}},
	} {
		tab := newShardTable()
		for _, st := range pathTo(tc.from) {
			if err := tab.move(s, wellFormed(s, st, 4)); err != nil {
				t.Fatalf("%s: reaching %s: %v", name, tc.from, err)
			}
		}
		before := tab.get(s)
		if err := tab.move(s, tc.to); !errors.Is(err, errShardTransition) {
			t.Errorf("%s: got %v, want errShardTransition", name, err)
		}
		if got := tab.get(s); got != before {
			t.Errorf("%s: a refused move changed the record", name)
		}
	}
}

// TestShardTableRandom: random sequences of moves (well formed or not,
// allowed or not) and observations keep the table's invariants, and the
// table agrees with a plain model of what each call should have done.
func TestShardTableRandom(t *testing.T) {
	type model struct {
		state           shardState
		held            bool
		holder, freedBy string
	}
	holders := []string{"", "a", "b"}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 11))
		tab := newShardTable()
		want := map[storage.ShardID]*model{}
		shards := make([]storage.ShardID, 4)
		for i := range shards {
			shards[i] = storage.ShardID{Group: storage.DefaultGroup, Index: i}
			want[shards[i]] = &model{}
		}
		for step := range 300 {
			s := shards[rng.IntN(len(shards))]
			w := want[s]
			what := ""
			switch rng.IntN(4) {
			case 0:
				h := holders[rng.IntN(len(holders))]
				tab.observeHeld(s, h)
				w.held, w.holder, w.freedBy = true, h, ""
				what = "held by " + w.holder
			case 1:
				tab.observeFreed(s)
				if w.holder != "" {
					w.freedBy = w.holder
				}
				w.held, w.holder = false, ""
				what = "freed"
			default:
				to := allShardStates[rng.IntN(len(allShardStates))]
				target := wellFormed(s, to, int64(1+rng.IntN(3)))
				malformed := rng.IntN(5) == 0
				if malformed {
					target.epoch = -1
				}
				err := tab.move(s, target)
				ok := shardMoveAllowed[w.state][to] && !malformed
				what = fmt.Sprintf("move %s → %s (malformed %v): %v", w.state, to, malformed, err)
				if ok != (err == nil) {
					t.Fatalf("seed %d step %d: %s", seed, step, what)
				}
				if ok {
					w.state = to
				}
			}
			if err := tab.check(); err != nil {
				t.Fatalf("seed %d step %d after %s: %v", seed, step, what, err)
			}
			for _, x := range shards {
				r, m := tab.get(x), want[x]
				if r.state != m.state || r.held != m.held || r.holder != m.holder || r.freedBy != m.freedBy {
					t.Fatalf("seed %d step %d after %s: shard %s is %+v, want %+v", seed, step, what, x, r, *m)
				}
			}
			for _, st := range allShardStates[1:] {
				in := tab.inState(st)
				if len(in) != tab.count(st) || !slices.IsSortedFunc(in, cmpShard) {
					t.Fatalf("seed %d step %d: inState(%s) = %v, count %d", seed, step, st, in, tab.count(st))
				}
			}
			hs := tab.holders()
			for _, x := range shards {
				if h, ok := hs[x]; ok != want[x].held || h != want[x].holder {
					t.Fatalf("seed %d step %d: holders()[%s] = %q %v, want %+v", seed, step, x, h, ok, *want[x])
				}
			}
		}
	}
}

// TestManagerRefusesMoves: the manager refuses moves that break its own
// invariants (owned while detached, pending while assigned elsewhere, more
// than releaseParallel releases at once), logs and counts them, and leaves
// the shard as it was.
func TestManagerRefusesMoves(t *testing.T) {
	n := releaseParallel + 1
	meta := storage.ClusterMeta{Shards: n, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName}
	m, err := New(nopStore{}, storage.RunnerInfo{ID: "m", Weight: 1}, meta, testConfig(), WithLogger(testLogger(t, "m")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.machine.Close)
	shard := func(i int) storage.ShardID { return storage.ShardID{Group: storage.DefaultGroup, Index: i} }
	s0, s1 := shard(0), shard(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.assignment = placement.Assignment{}
	for i := range n {
		m.assignment[shard(i)] = "m"
	}
	m.assignment[s1] = "other"

	if m.moveLocked(s0, wellFormed(s0, shardOwned, 2)) {
		t.Error("owned while detached: allowed")
	}
	if m.moveLocked(s1, wellFormed(s1, shardPending, 2)) {
		t.Error("pending while assigned elsewhere: allowed")
	}
	if !m.moveLocked(s0, wellFormed(s0, shardPending, 2)) {
		t.Error("pending while assigned to us: refused")
	}
	m.attached = true
	for i := range n {
		if !m.moveLocked(shard(i), wellFormed(shard(i), shardOwned, 2)) {
			t.Errorf("%s: owned while attached: refused", shard(i))
		}
	}
	for i := range releaseParallel {
		if !m.moveLocked(shard(i), releasingOf(m.shards.get(shard(i)).own)) {
			t.Errorf("release %d of %d at once: refused", i+1, releaseParallel)
		}
	}
	last := shard(n - 1)
	if m.moveLocked(last, releasingOf(m.shards.get(last).own)) {
		t.Errorf("release %d at once: allowed", n)
	}
	if st := m.shards.get(last).state; st != shardOwned {
		t.Errorf("after a refused move %s is %s, want owned", last, st)
	}
	if n := m.badMoves.Load(); n != 3 {
		t.Errorf("badMoves = %d, want 3", n)
	}
	if err := m.checkShardsLocked(); err != nil {
		t.Error(err)
	}
}

// checkShards verifies the shard table's and the manager's invariants.
func (m *Manager) checkShards() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.checkShardsLocked()
}

// checkStopped verifies what a stopped manager must hold: no refused shard
// state change ever, and no lock of ours in any state.
func (m *Manager) checkStopped() error {
	if n := m.badMoves.Load(); n > 0 {
		return fmt.Errorf("%d shard state changes were refused (see the runner's log)", n)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkShardsLocked(); err != nil {
		return err
	}
	for _, st := range allShardStates[1:] {
		if n := m.shards.count(st); n > 0 {
			return fmt.Errorf("%d shards %s after Run returned", n, st)
		}
	}
	return nil
}
