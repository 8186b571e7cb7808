// Assignment specification, hash name "xxhash64-rendezvous-sticky/v2"
// (HashName, recorded in the cluster meta; ProcedureV1 in procedure.go
// describes how v1, kept for clusters created with it, differs).
//
// Every runner computes the owner of every shard on its own, from the same
// membership and current owners, and they must agree bit for bit. The procedure is therefore
// specified here exactly, so that another implementation can reproduce it.
//
//  1. Candidates. Entries with an empty ID are ignored. A weight that is NaN,
//     ±Inf, negative or 0 counts as 0: the runner is drained and owns
//     nothing. Entries sharing an ID are merged conservatively, so that the
//     result does not depend on their order: the smallest weight, and the
//     intersection of their groups (an empty list means every group).
//     Duplicate group names count once.
//
//  2. Each group g is assigned on its own. Its eligible runners are the
//     candidates with a weight > 0 that serve g, sorted by ID (byte-wise);
//     if there are none, the shards of g are absent from the result. Weights
//     are normalised by the largest eligible weight: w = weight / max, in
//     (0, 1] (a ratio that underflows to 0 makes the runner ineligible).
//     S is shardsPerGroup; shards are the indices 0 ≤ k < S.
//
//  3. Scores. For shard k and runner r:
//
//     h     = XXH64, seed 0, of the bytes g + "/" + decimal(k) + "/" + r.ID
//     (for example "default/17/runner-a")
//     u     = (float64(h >> 12) + 0.5) × 2^-52, in (0, 1) and exact
//     score = w / -ln(u)
//
//     computed in IEEE-754 binary64, each operation rounded on its own (no
//     fused multiply-add), with ln being fdlibm's e_log algorithm as written
//     in hash.go. The pairs (k, r) are totally ordered by score descending,
//     then runner ID ascending, then k ascending.
//
//  4. Load bands. ideal = S × weight / Σ weight over the eligible runners
//     (the weights as given, added in ID order; the normalised w when that
//     sum overflows); tol = max(0.1 × ideal, 1);
//     lo = min(max(ceil(ideal - tol), 0), floor(ideal));
//     hi = max(floor(ideal + tol), ceil(ideal)).
//     Every runner always ends with lo ≤ count ≤ hi, so within max(10% of
//     its ideal, 1 shard) of its ideal. [lo, hi] is what a runner may keep.
//
//  5. Targets. held(r) is the number of shards of g that r owns now (the
//     current owners; 0 for all at a cold start). Each runner's target
//     starts at t(r) = min(max(held(r), lo(r)), hi(r)). Then, one shard at
//     a time until Σ t = S: while Σ t > S, the runner with t > lo furthest
//     above its ideal (largest t - ideal) gives one up; while Σ t < S, the
//     runner with t < hi furthest below it (largest ideal - t) takes one
//     more; ties go to the first by ID. (Σ lo ≤ S ≤ Σ hi, so this ends.)
//     At a cold start every runner reaches the floor of its ideal before
//     any exceeds it, so each ends at the floor or the ceiling.
//
//  6. Placement.
//     a. Keep: a runner that owns more than t(r) shards keeps the t(r) it
//     scores highest (score descending, then shard index); otherwise it
//     keeps all it owns.
//     b. Walk: walk the pairs of the shards nobody kept in the order of
//     step 3 and give shard k to runner r when k is still unplaced and
//     count(r) < t(r).
//
// Step 6b is bounded-load rendezvous hashing in its greedy, stable-matching
// form: strong preferences are honoured first, and a shard goes to a lower
// choice only because its better choices are full of shards that prefer
// them even more.
//
// Keeping shards with their current owners is what makes changes cheap. A
// function of the membership alone cannot both bound the load this tightly
// and move only the shards of the runner that comes or goes (with 256
// shards over 50 runners, 5 or 6 each, there is no room to absorb a leave
// without reshuffling). A join moves only shards to the newcomer (its lo:
// the others give up what their new band no longer lets them keep, largest
// excess first); a leave or a drain moves only the leaver's shards, to the
// runners furthest below their new ideal. The current owners are the
// shard-lock holders every runner sees in etcd, so every runner computes the
// same result, and once the holders match it the result is a fixed point.
//
// The targets depend on the owners only through their counts, clamped to
// the bands, in a way a hand-over does not change: while one is under way,
// a runner giving shards up holds between its target and what it held, one
// taking shards holds between what it held and its target, and from any
// such counts the clamp and the one-at-a-time adjustment land on the same
// targets. With the targets fixed, keeping the highest-scoring shards and
// walking the pairs (the stable matching of the free shards to the free
// places) give every shard still to move the same new owner, whether it is
// still held, released or already taken. So every state of a hand-over —
// which is what runners that act on the revisions they have seen compute
// from — has the hand-over's end state as its assignment, and each shard
// moves once, straight to its new owner (TestReassignPathStable).

package placement

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/storage"
)

// balanceTolerance is the fraction of its ideal share by which a runner's
// shard count may differ from it (but never less than one shard).
const balanceTolerance = 0.10

// Candidate is a runner as the assignment sees it.
type Candidate struct {
	// ID is the runner's unique, stable id; entries with an empty ID are
	// ignored.
	ID string
	// Weight is the runner's relative share of the shards of every group it
	// serves. 0 drains the runner; NaN, ±Inf and negative values count as 0.
	Weight float64
	// Groups are the shard groups the runner serves; empty means every
	// group.
	Groups []string
}

// CandidateOf returns the Candidate for a registered runner.
func CandidateOf(r storage.RunnerInfo) Candidate {
	return Candidate{ID: r.ID, Weight: r.Weight, Groups: r.Groups}
}

// Assignment maps every assigned shard to its owner's runner id.
type Assignment map[storage.ShardID]string

// ShardsOf returns the shards owned by runnerID, sorted by ShardID.Less.
func (a Assignment) ShardsOf(runnerID string) []storage.ShardID {
	var out []storage.ShardID
	for s, id := range a {
		if id == runnerID {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, compareShards)
	return out
}

// Counts returns the number of shards owned by each runner that owns any.
func (a Assignment) Counts() map[string]int {
	out := make(map[string]int)
	for _, id := range a {
		out[id]++
	}
	return out
}

// compareShards orders shards as ShardID.Less does.
func compareShards(x, y storage.ShardID) int {
	if c := strings.Compare(x.Group, y.Group); c != 0 {
		return c
	}
	return cmp.Compare(x.Index, y.Index)
}

// Assign returns the owner of every shard of every group, following the
// specification at the top of this file: weighted rendezvous hashing
// (score = weight / -ln(u), u from XXH64 of "group/shard/runner-id") with
// each runner's load held within max(10%, 1 shard) of its weighted ideal
// share of the runners eligible for the group. Shards with no eligible
// runner are absent. The result depends only on the inputs' content, not on
// their order, and is identical on every platform. A shardsPerGroup ≤ 0
// yields an empty assignment. Assign is safe for concurrent use.
//
// Time is O(groups × shards × runners), one hash per (shard, runner) pair,
// spread over up to GOMAXPROCS goroutines for large groups; memory is
// O(shards × runners) for one group at a time (4 bytes a pair), so callers
// must bound shardsPerGroup.
func Assign(groups []string, shardsPerGroup int, runners []Candidate) Assignment {
	return ProcedureV2.Assign(groups, shardsPerGroup, runners)
}

// Reassign is Assign given the current owners (the holders of the shard
// locks, as every runner sees them in etcd), following step 6 of the
// specification: a shard stays with its current owner while that owner is
// eligible and within its load band; only the shards of runners that left,
// drained or hold too many are placed anew, and a runner below its band
// takes the shards it prefers from runners above theirs. So a join moves
// about the newcomer's share, all of it to the newcomer, and a leave or a
// drain moves only the leaving runner's shards; with nothing held it is
// Assign. Every runner computes the same result from the same membership and
// owners, and once the owners match it, it is a fixed point: Reassign of an
// assignment it returned returns it unchanged.
func Reassign(groups []string, shardsPerGroup int, runners []Candidate, current Assignment) Assignment {
	return ProcedureV2.Reassign(groups, shardsPerGroup, runners, current)
}

// candidate is a merged, cleaned Candidate.
type candidate struct {
	id     string
	weight float64         // ≥ 0
	all    bool            // serves every group
	groups map[string]bool // when !all
}

func (c *candidate) serves(g string) bool { return c.all || c.groups[g] }

// mergeCandidates cleans weights, merges entries that share an id (smallest
// weight, intersection of groups) and sorts the result by id.
func mergeCandidates(runners []Candidate) []candidate {
	byID := make(map[string]int, len(runners))
	var out []candidate
	for _, r := range runners {
		if r.ID == "" {
			continue
		}
		w := r.Weight
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			w = 0
		}
		var groups map[string]bool
		if len(r.Groups) > 0 {
			groups = make(map[string]bool, len(r.Groups))
			for _, g := range r.Groups {
				groups[g] = true
			}
		}
		i, dup := byID[r.ID]
		if !dup {
			byID[r.ID] = len(out)
			out = append(out, candidate{id: r.ID, weight: w, all: groups == nil, groups: groups})
			continue
		}
		c := &out[i]
		c.weight = min(c.weight, w)
		switch {
		case groups == nil: // every group: the intersection is unchanged
		case c.all:
			c.all, c.groups = false, groups
		default:
			for g := range c.groups {
				if !groups[g] {
					delete(c.groups, g)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b candidate) int { return strings.Compare(a.id, b.id) })
	return out
}
