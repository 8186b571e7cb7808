// Assignment specification, hash name "xxhash64-rendezvous-sticky/v1"
// (HashName, recorded in the cluster meta).
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
//     its ideal, 1 shard) of its ideal. [lo, hi] is what a runner may keep;
//     new placements aim tighter.
//
//  5. Cold start (no shard of the group has an owner that may keep it, step
//     6a): walk all S × n pairs in the order of step 3 and give shard k to
//     runner r when k is still unplaced and r may take one more shard:
//     count(r) < floor(ideal(r)), or count(r) < ceil(ideal(r)) and
//     unplaced > deficit, where unplaced counts the shards not yet placed
//     and deficit is the sum over runners of max(floor(ideal) - count, 0).
//     Every runner ends at the floor or the ceiling of its ideal.
//
//  6. Otherwise (Reassign, from the current owners):
//     a. Keep: an eligible runner keeps the shards it owns, up to its hi;
//     when it owns more it keeps the hi it scores highest (score
//     descending, then shard index).
//     b. Place the other shards: walk their pairs in the order of step 3
//     once, giving shard k to r while count(r) < lo(r); then, one shard at
//     a time, the runner with the largest ideal - count (first by ID on a
//     tie) takes the unplaced shard it scores highest.
//     c. Lift: each runner still below lo (in ID order) takes, in the order
//     of its own scores, shards of runners above their lo until it reaches
//     its lo.
//
// Step 5 is bounded-load rendezvous hashing in its greedy, stable-matching
// form: strong preferences are honoured first, and a shard goes to a lower
// choice only because its better choices are full of shards that prefer
// them even more. Placing tightly at a cold start leaves every runner room
// inside its band, so that later changes move little.
//
// Step 6 is what makes changes cheap. A function of the membership alone
// cannot both bound the load this tightly and move only the shards of the
// runner that comes or goes (with 256 shards over 50 runners, 5 or 6 each,
// there is no room to absorb a leave without reshuffling); keeping shards
// with their current owners can. A join moves only shards to the newcomer,
// about its ideal share (the shards runners above their new band shed, then
// what it lifts from runners above their lo); a leave or a drain moves only
// the leaver's shards (unless integer rounding leaves a runner below its new
// lo). The current owners are the shard-lock holders every runner sees in
// etcd, so every runner computes the same result, and once the holders
// match it the result is a fixed point.

package sharding

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/tenurehq/tenure/storage"
)

// HashName names the assignment procedure and its hash for
// storage.ClusterMeta.Hash. Any change to the procedure that can change an
// owner must change the name, so that runners of different versions refuse
// to share a cluster instead of disagreeing about owners.
const HashName = "xxhash64-rendezvous-sticky/v1"

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
	return Reassign(groups, shardsPerGroup, runners, nil)
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
	if shardsPerGroup <= 0 || len(groups) == 0 {
		return make(Assignment)
	}
	out := make(Assignment, min(shardsPerGroup, maxSizeHint/len(groups))*len(groups))
	cands := mergeCandidates(runners)
	var p placer
	seen := make(map[string]bool, len(groups))
	for _, g := range groups {
		if seen[g] {
			continue
		}
		seen[g] = true
		p.assignGroup(out, g, shardsPerGroup, cands, current)
	}
	return out
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

// placer holds the scratch space reused across the groups of one Assign.
type placer struct {
	group  string
	ids    []string  // eligible runner ids, sorted
	w      []float64 // normalised weights
	raw    []float64 // weights as given: shares are computed from them, so integer weights give exact ideals
	lo, hi []int     // load bands: what a runner may keep
	// The bands walk places shards within: lo and hi when keeping
	// (sticky), floor and ceil of the ideal at a cold start.
	walkLo, walkHi []int
	flo, fhi       []int     // floor and ceil of the ideal, within the band
	ideal          []float64 // weighted ideal shares
	count          []int
	invW           []float64 // 1 / w
	cb             []float32 // cb[k*n+r]: costBound of shard k for runner r
	heap           pairHeap
	buf            []byte
	keys           keyScratch // startRange scratch when single-threaded
	keyCap         int        // the longest hashed key of the group
}

// assignGroup assigns the shards of group g among the eligible cands,
// keeping what current owners may keep (step 6).
func (p *placer) assignGroup(out Assignment, g string, shards int, cands []candidate, current Assignment) {
	p.group, p.ids, p.w, p.invW, p.raw = g, p.ids[:0], p.w[:0], p.invW[:0], p.raw[:0]
	wmax := 0.0
	for i := range cands {
		c := &cands[i]
		if c.weight > 0 && c.serves(g) {
			wmax = max(wmax, c.weight)
		}
	}
	if wmax == 0 {
		return
	}
	for i := range cands {
		c := &cands[i]
		if c.weight > 0 && c.serves(g) {
			if w := c.weight / wmax; w > 0 {
				p.ids = append(p.ids, c.id)
				p.w = append(p.w, w)
				p.invW = append(p.invW, 1/w)
				p.raw = append(p.raw, c.weight)
			}
		}
	}
	longest := 0
	for _, id := range p.ids {
		longest = max(longest, len(id))
	}
	p.keyCap = len(g) + len("/-9223372036854775808/") + longest
	p.bands(shards)
	p.start(shards)
	kept := p.keep(out, shards, current)
	if kept == 0 {
		// Cold start: place everything as tightly as possible, so that
		// later changes find every runner inside its band with room to
		// spare, and move little.
		p.walkLo, p.walkHi = p.flo, p.fhi
		p.heap.init()
		deficit := 0
		for _, lo := range p.walkLo {
			deficit += lo
		}
		p.walk(out, deficit)
		return
	}
	p.placeFree(out, shards)
	p.steal(out, shards)
}

// placeFree places the shards nobody keeps (step 6b). First every (free
// shard, runner) pair is walked in the order of step 3 to lift runners to
// their lo; then, one shard at a time, the runner furthest below its ideal
// share takes the free shard it scores highest. So the shards a join frees
// (from runners now above their band) go to the newcomer, and those of a
// runner that left to the runners short of their share.
func (p *placer) placeFree(out Assignment, shards int) {
	n := len(p.ids)
	var pairs []scoredPair
	free := 0
	for k := 0; k < shards; k++ {
		if _, ok := out[storage.ShardID{Group: p.group, Index: k}]; ok {
			continue
		}
		free++
		p.buf = appendKey(slices.Grow(p.buf[:0], p.keyCap), p.group, k)
		for r := 0; r < n; r++ {
			pairs = append(pairs, scoredPair{score: p.exact(p.buf, r), runner: r, shard: k})
		}
	}
	slices.SortFunc(pairs, func(a, b scoredPair) int {
		if a.before(b) {
			return -1
		}
		if b.before(a) {
			return 1
		}
		return 0
	})
	placed := make(map[int]bool, free)
	place := func(r, k int) {
		placed[k] = true
		p.count[r]++
		free--
		out[storage.ShardID{Group: p.group, Index: k}] = p.ids[r]
	}
	for _, sp := range pairs {
		if !placed[sp.shard] && p.count[sp.runner] < p.lo[sp.runner] {
			place(sp.runner, sp.shard)
		}
	}
	// Each runner's free shards in its own order of preference.
	prefs := make([][]int, n)
	for _, sp := range pairs {
		if !placed[sp.shard] {
			prefs[sp.runner] = append(prefs[sp.runner], sp.shard)
		}
	}
	next := make([]int, n)
	for free > 0 {
		// Σ(ideal − count) = free > 0, so the neediest runner is below its
		// ideal, hence below its hi.
		r := 0
		for c := 1; c < n; c++ {
			if float64(p.ideal[c]-float64(p.count[c])) > float64(p.ideal[r]-float64(p.count[r])) {
				r = c
			}
		}
		for placed[prefs[r][next[r]]] {
			next[r]++
		}
		place(r, prefs[r][next[r]])
	}
}

// keep places the shards of group p.group that current owners keep (step
// 6a): an eligible owner keeps its held shards up to its hi, the ones it
// scores highest when it holds more. It returns how many were kept.
func (p *placer) keep(out Assignment, shards int, current Assignment) int {
	if len(current) == 0 {
		return 0
	}
	index := make(map[string]int, len(p.ids))
	for r, id := range p.ids {
		index[id] = r
	}
	held := make([][]int, len(p.ids))
	for k := 0; k < shards; k++ {
		if r, ok := index[current[storage.ShardID{Group: p.group, Index: k}]]; ok {
			held[r] = append(held[r], k)
		}
	}
	kept := 0
	for r, ks := range held {
		if len(ks) > p.hi[r] {
			ks = p.preferred(r, ks)[:p.hi[r]]
		}
		for _, k := range ks {
			out[storage.ShardID{Group: p.group, Index: k}] = p.ids[r]
		}
		p.count[r] = len(ks)
		kept += len(ks)
	}
	return kept
}

// preferred returns shards ks sorted by runner r's score, highest first
// (then by shard index).
func (p *placer) preferred(r int, ks []int) []int {
	type ranked struct {
		k     int
		score float64
	}
	rs := make([]ranked, len(ks))
	for i, k := range ks {
		p.buf = appendKey(slices.Grow(p.buf[:0], p.keyCap), p.group, k)
		rs[i] = ranked{k, p.exact(p.buf, r)}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if a.score != b.score {
			return cmp.Compare(b.score, a.score)
		}
		return cmp.Compare(a.k, b.k)
	})
	out := make([]int, len(rs))
	for i, x := range rs {
		out[i] = x.k
	}
	return out
}

// steal lifts every runner still below its lo (a newcomer: the walk had no
// free shards for it) to lo (step 6b): in id order, each takes the shards it
// scores highest among those of runners above their lo, until it reaches
// lo. Donors only shrink and never below lo, so one pass over each taker's
// ranking suffices.
func (p *placer) steal(out Assignment, shards int) {
	index := make(map[string]int, len(p.ids))
	for r, id := range p.ids {
		index[id] = r
	}
	all := make([]int, shards)
	for k := range all {
		all[k] = k
	}
	for r := range p.ids {
		if p.count[r] >= p.lo[r] {
			continue
		}
		for _, k := range p.preferred(r, all) {
			if p.count[r] >= p.lo[r] {
				break
			}
			sh := storage.ShardID{Group: p.group, Index: k}
			d := index[out[sh]]
			if d == r || p.count[d] <= p.lo[d] {
				continue
			}
			out[sh] = p.ids[r]
			p.count[d]--
			p.count[r]++
		}
	}
}

// walk places the unplaced shards, whose best pairs are in p.heap (step 5).
// It walks the pairs in order with a lazy max-heap holding, for every
// unplaced shard, its best pair at the time it was pushed. Availability only
// ever shrinks (counts only grow, and unplaced − deficit never increases), so
// a popped pair whose runner is still available is the next pair of the walk
// that places a shard; one whose runner is no longer available is replaced
// by the shard's best remaining pair, which can only rank lower. deficit is
// the shards still needed to lift every runner to its lo.
func (p *placer) walk(out Assignment, deficit int) {
	g := p.group
	unplaced := len(p.heap)
	for unplaced > 0 {
		slack := max(unplaced-deficit, 0)
		top := p.heap[0]
		k, r := top.shard, top.runner
		if !p.available(r, slack) {
			p.buf = appendKey(slices.Grow(p.buf[:0], p.keyCap), g, k)
			r, s := p.best(p.buf, k, -1, slack)
			p.heap[0] = scoredPair{score: s, runner: r, shard: k}
			p.heap.down(0)
			continue
		}
		if p.count[r] < p.walkLo[r] {
			deficit--
		}
		p.count[r]++
		unplaced--
		out[storage.ShardID{Group: g, Index: k}] = p.ids[r]
		p.heap.pop()
	}
}

// available reports whether runner r may take one more shard, given slack =
// unplaced − deficit.
func (p *placer) available(r, slack int) bool {
	return p.count[r] < p.walkLo[r] || (p.count[r] < p.walkHi[r] && slack > 0)
}

// best returns the runner of shard k's highest pair and its score, among
// the runners available given slack = unplaced − deficit, or among all of
// them when slack < 0 (the start, when every runner is available anyway).
// key holds the hashed prefix "<group>/<k>/"; m, when ≥ 0, is the runner
// with the lowest cost bound, known to be available.
//
// Exact scores cost a hash and a logarithm, so they are computed only for
// the runners whose cost bound does not prove them below the best exact
// score found so far: usually one or two per call. While shards are
// unplaced some runner is always available: with slack > 0 one is below hi
// (the bands sum to at least S), and with slack = 0 the deficit is
// positive, so one is below lo.
func (p *placer) best(key []byte, k, m, slack int) (int, float64) {
	n := len(p.ids)
	row := p.cb[k*n : (k+1)*n]
	if m < 0 {
		for r, c := range row {
			if (m < 0 || c < row[m]) && (slack < 0 || p.available(r, slack)) {
				m = r
			}
		}
		if m < 0 { // unreachable (see above); never leave a shard unplaced
			m = 0
		}
	}
	b, bs := m, p.exact(key, m)
	for r, c := range row {
		if r == m || boundBelow(c, bs) || (slack >= 0 && !p.available(r, slack)) {
			continue
		}
		// Equal scores go to the runner that sorts first by id.
		if s := p.exact(key, r); s > bs || (s == bs && r < b) {
			b, bs = r, s
		}
	}
	return b, bs
}

// exact returns the score of runner r for the shard whose hashed prefix is
// key. It appends to key, beyond its length, and so must not share key's
// backing array with another goroutine.
func (p *placer) exact(key []byte, r int) float64 {
	return rendezvousScore(p.w[r], hashBytes(append(key, p.ids[r]...)))
}

// start fills p.cb with a bound of every (shard, runner) score, which costs
// a hash but no logarithm, and p.heap with every shard's best pair. This is
// where the time goes (a hash per pair), so large groups are split by shard
// range over up to GOMAXPROCS goroutines; each writes only its own rows and
// heap slots, so the result does not depend on scheduling.
func (p *placer) start(shards int) {
	n := len(p.ids)
	if cap(p.cb) < shards*n {
		p.cb = make([]float32, shards*n)
	}
	p.cb = p.cb[:shards*n]
	if cap(p.heap) < shards {
		p.heap = make(pairHeap, shards)
	}
	p.heap = p.heap[:shards]
	workers := min(runtime.GOMAXPROCS(0), maxWorkers, shards*n/pairsPerWorker)
	if workers <= 1 {
		p.startRange(&p.keys, 0, shards)
		return
	}
	var wg sync.WaitGroup
	step := (shards + workers - 1) / workers
	for from := 0; from < shards; from += step {
		wg.Go(func() { p.startRange(new(keyScratch), from, min(from+step, shards)) })
	}
	wg.Wait()
}

// maxSizeHint caps the size Assign preallocates its result for, so that an
// absurd shard count costs memory only as the shards are placed.
const maxSizeHint = 1 << 20

// Parallelism limits for start: below pairsPerWorker pairs per goroutine
// the start-up cost outweighs the gain.
const (
	maxWorkers     = 8
	pairsPerWorker = 16384
)

// startRange does the work of start for shards [from, to), using ks as
// scratch.
//
// Hashing dominates, and a key built just before it is hashed stalls the
// hash on reading back bytes still in flight to memory (about 3× slower on
// amd64). So the keys of all runners are laid out once, side by side, and
// for each shard only the digits of the shard index are rewritten, in every
// key before any is hashed; the keys are laid out again only when the
// number of digits changes.
func (p *placer) startRange(ks *keyScratch, from, to int) {
	n := len(p.ids)
	stride := p.keyCap
	if cap(ks.mem) < n*stride {
		ks.mem = make([]byte, n*stride)
	}
	if cap(ks.key) < n {
		ks.key = make([][]byte, n)
	}
	ks.key = ks.key[:n]
	if cap(ks.prefix) < stride {
		ks.prefix = make([]byte, 0, stride)
	}
	digits := len(p.group) + 1 // offset of the shard index in a key
	laidOut := -1              // prefix length the keys are laid out for
	for k := from; k < to; k++ {
		ks.prefix = appendKey(ks.prefix[:0], p.group, k)
		if len(ks.prefix) != laidOut {
			laidOut = len(ks.prefix)
			for r, id := range p.ids {
				key := append(ks.mem[r*stride:r*stride:(r+1)*stride], ks.prefix...)
				ks.key[r] = append(key, id...)
			}
		} else {
			index := ks.prefix[digits : len(ks.prefix)-1]
			for _, key := range ks.key {
				for i, d := range index {
					key[digits+i] = d
				}
			}
		}
		row := p.cb[k*n : (k+1)*n]
		m, low := 0, float32(math.Inf(1))
		for r, key := range ks.key {
			c := costBound(p.invW[r], hashBytes(key))
			row[r] = c
			if c < low {
				m, low = r, c
			}
		}
		r, s := p.best(ks.prefix, k, m, -1)
		p.heap[k] = scoredPair{score: s, runner: r, shard: k}
	}
}

// keyScratch is the scratch space of one startRange.
type keyScratch struct {
	mem    []byte   // n keys of keyCap bytes each
	key    [][]byte // the runners' keys for the current shard, within mem
	prefix []byte   // the current shard's prefix, with room for an id
}

// bands computes every eligible runner's load band (step 4) and resets the
// counts.
func (p *placer) bands(shards int) {
	n := len(p.ids)
	p.lo, p.hi, p.count = resizeInts(p.lo, n), resizeInts(p.hi, n), resizeInts(p.count, n)
	p.flo, p.fhi = resizeInts(p.flo, n), resizeInts(p.fhi, n)
	p.walkLo, p.walkHi = p.lo, p.hi
	if cap(p.ideal) < n {
		p.ideal = make([]float64, n)
	}
	p.ideal = p.ideal[:n]
	// Shares come from the weights as given, so that integer weights give
	// exact ideals; from the normalised ones when their sum overflows.
	ws := p.raw
	total := 0.0
	for _, w := range ws {
		total += w
	}
	if math.IsInf(total, 0) {
		ws, total = p.w, 0
		for _, w := range ws {
			total += w
		}
	}
	for r, w := range ws {
		ideal := float64(float64(shards)*w) / total
		tol := max(balanceTolerance*ideal, 1)
		floor, ceil := math.Floor(ideal), math.Ceil(ideal)
		p.lo[r] = int(min(max(math.Ceil(ideal-tol), 0), floor))
		p.hi[r] = int(min(max(math.Floor(ideal+tol), ceil), float64(shards)))
		p.ideal[r] = ideal
		p.flo[r], p.fhi[r] = int(floor), int(ceil)
		p.count[r] = 0
	}
}

// resizeInts returns s with length n, reallocated if too small.
func resizeInts(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	return s[:n]
}

// scoredPair is one (shard, runner) pair of a group with its score.
type scoredPair struct {
	score  float64
	runner int // index in id order
	shard  int
}

// before is the total order of step 3: score descending, then runner id,
// then shard index.
func (a scoredPair) before(b scoredPair) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	if a.runner != b.runner {
		return a.runner < b.runner
	}
	return a.shard < b.shard
}

// pairHeap is a binary heap whose root is the pair that comes first.
type pairHeap []scoredPair

func (h pairHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pairHeap) pop() {
	old := *h
	last := len(old) - 1
	old[0] = old[last]
	*h = old[:last]
	h.down(0)
}

func (h pairHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && h[r].before(h[l]) {
			c = r
		}
		if !h[c].before(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
