package placement

import (
	"encoding/binary"
	"math"
	"runtime"
	"sync"
)

// placer holds the scratch space reused across the groups of one Assign.
type placer struct {
	proc   Procedure
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
	target         []int     // target counts (step 5)
	order          []int     // scratch for targets' heap
	invW           []float64 // 1 / w
	// Up to fullRows runners, cb[k*n+r] is the costBound of shard k for
	// runner r (topK is 0). Above, each shard keeps only its topK lowest,
	// ascending (see start): shard k's are topB[k*topK:(k+1)*topK], of
	// the runners topR[...].
	cb   []float32
	topK int
	topB []float32
	topR []int32
	row  []float32 // a shard's bounds, recomputed (rebest)
	// owner[k] is the runner that holds shard k, -1 if none (see owners);
	// once the owners have kept theirs (keepUpTo), the runner that keeps
	// it. When anything is held, ownHash[k] is the hash of shard k's pair
	// with its holder, computed by the start (see keepBest).
	owner   []int32
	ownHash []uint64
	ranked  []ranked // keepBest scratch
	heap    pairHeap
	buf     []byte
	keys    keyScratch // startRange scratch when single-threaded
	keyCap  int        // the longest hashed key of the group
}

// assignGroup assigns the shards of group g among the eligible cands, from
// the current owners, by p.proc.
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
	p.owners(shards, current)
	p.start(shards)
	if p.proc == ProcedureV1 {
		p.assignGroupV1(out, shards)
		return
	}
	p.assignGroupV2(out, shards)
}

// best returns the runner of the highest pair of the shard whose bounds
// are row, and its score, among
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
func (p *placer) best(row []float32, key []byte, m, slack int) (int, float64) {
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

// start computes a bound of every (shard, runner) score, which costs a
// hash but no logarithm, fills p.heap with every shard's best pair, and
// keeps each shard's topK lowest bounds for the walk (rebest): all of them
// would be 64 MB at 16,384 shards × 1,000 runners, written once and mostly
// never read again. This is where the time goes (a hash per pair), so large
// groups are split by shard range over up to GOMAXPROCS goroutines; each
// writes only its own shards' slots, so the result does not depend on
// scheduling.
func (p *placer) start(shards int) {
	n := len(p.ids)
	if !keepLowest(shards, n) {
		p.topK = 0
		p.cb = resizeFloat32s(p.cb, shards*n)
	} else {
		p.topK = maxTop
		p.topB, p.topR = resizeFloat32s(p.topB, shards*p.topK), resizeInt32s(p.topR, shards*p.topK)
	}
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

// In large groups start keeps maxTop of a shard's lowest bounds, not all
// (see keepLowest). The walk re-ranks a shard when its best runner fills
// up; at 16,384 shards × 1,000 runners a cold start re-ranks about 2,900
// times, nine in ten of them within a shard's 16 best runners, and bestTop
// hashes the row again for the rest.
const maxTop = 16

// keepLowestPairs is the group size (shards × runners) above which start
// keeps only a shard's lowest bounds: 16 MB of bounds.
var keepLowestPairs = 1 << 22

// keepLowest reports whether start keeps only each shard's maxTop lowest
// bounds for a group of shards × n runners, rather than whole rows. Small
// groups keep whole rows: there keeping the lowest costs more than it
// saves, as a row fills its kept bounds for much of its length, and the
// insertions and their mispredicted branches cost more than the bounds
// they spare (16,384 shards × 100 runners: 15 ms with whole rows, 24 ms
// keeping 16). So do groups with few shards a runner: most runners fill
// up at once, and the walk hashes rows again and again (256 × 1,000:
// 2.7 ms with whole rows, 5 ms keeping 16).
func keepLowest(shards, n int) bool {
	return n > 4*maxTop && shards >= 4*n && shards*n > keepLowestPairs
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
// key before any is hashed, with one 8-byte store a key; the keys are laid
// out again only when the number of digits changes. Of a row's bounds only
// the topK lowest are kept, and a hash at or below the cutoff of the
// highest kept bound is rejected without computing its bound (most of a
// row, once the first topK are in).
func (p *placer) startRange(ks *keyScratch, from, to int) {
	n := len(p.ids)
	stride := p.keyCap
	if cap(ks.mem) < n*stride {
		ks.mem = make([]byte, n*stride)
	}
	if cap(ks.key) < n {
		ks.key = make([][]byte, n)
		ks.tail = make([]uint64, n)
	}
	ks.key, ks.tail = ks.key[:n], ks.tail[:n]
	if cap(ks.prefix) < stride {
		ks.prefix = make([]byte, 0, stride)
	}
	digits := len(p.group) + 1 // offset of the shard index in a key
	laidOut := -1              // prefix length the keys are laid out for
	for k := from; k < to; k++ {
		ks.prefix = appendKey(ks.prefix[:0], p.group, k)
		if len(ks.prefix) != laidOut {
			laidOut = len(ks.prefix)
			nd := laidOut - digits - 1 // digits of the index
			for r, id := range p.ids {
				key := append(ks.mem[r*stride:r*stride:(r+1)*stride], ks.prefix...)
				ks.key[r] = append(key, id...)
				// The 8 bytes from the index on, its digits zeroed:
				// what follows them ("/" and the id) in the key, and
				// whatever lies beyond within the stride.
				ks.tail[r] = binary.LittleEndian.Uint64(ks.mem[r*stride+digits:]) &^ (1<<(8*nd) - 1)
			}
		} else if index := ks.prefix[digits : len(ks.prefix)-1]; len(index) <= 8 {
			// One 8-byte store a key, not a store per digit: the index's
			// digits over the key's tail. stride ≥ digits + 8 (keyCap).
			var le [8]byte
			copy(le[:], index)
			dw := binary.LittleEndian.Uint64(le[:])
			for r := range ks.key {
				binary.LittleEndian.PutUint64(ks.mem[r*stride+digits:], dw|ks.tail[r])
			}
		} else {
			for _, key := range ks.key {
				copy(key[digits:], index)
			}
		}
		if p.topK == 0 {
			row := p.cb[k*n : (k+1)*n]
			own := p.heldBy(k)
			m := p.rowBounds(k, ks.key, row, own)
			if own >= 0 {
				p.heap[k] = scoredPair{runner: -1, shard: k} // see startBest
				continue
			}
			r, s := p.best(row, ks.prefix, m, -1)
			p.heap[k] = scoredPair{score: s, runner: r, shard: k}
			continue
		}
		// The row's lowest bounds, kept as they come: after the first
		// topK, a bound rarely beats the highest kept one.
		K := p.topK
		tb, tr := p.topB[k*K:(k+1)*K], p.topR[k*K:(k+1)*K]
		size, thr, cut := 0, float32(math.Inf(1)), int64(-1)
		for r, key := range ks.key {
			h := hashBytes(key)
			if int64(h>>12) <= cut {
				continue // its bound is at least thr (see boundCutoff)
			}
			if c := costBound(p.invW[r], h); c < thr {
				if size = insertTop(tb, tr, size, c, r); size == K {
					thr = tb[K-1]
					cut = boundCutoff(thr)
				}
			}
		}
		if p.hashHeld(k, ks) {
			p.heap[k] = scoredPair{runner: -1, shard: k} // see startBest
			continue
		}
		r, s := p.bestTop(k, -1, ks.prefix, &ks.row)
		p.heap[k] = scoredPair{score: s, runner: r, shard: k}
	}
}

// rowBounds sets row to the bounds of shard k for every runner, from the
// runners' keys, and returns the runner of the lowest (the first). For a
// held shard (own ≥ 0) it keeps the hash of the holder's pair in
// p.ownHash as it computes it (see hashHeld): for a row of a few runners,
// hashing it again would cost a third more. A loop of its own, so that the
// compare costs nothing where nothing is held (Assign: 1–2 % at 100 runners).
func (p *placer) rowBounds(k int, keys [][]byte, row []float32, own int) int {
	m, low := 0, float32(math.Inf(1))
	if own < 0 {
		for r, key := range keys {
			c := costBound(p.invW[r], hashBytes(key))
			row[r] = c
			if c < low {
				m, low = r, c
			}
		}
		return m
	}
	for r, key := range keys {
		h := hashBytes(key)
		if r == own {
			p.ownHash[k] = h
		}
		c := costBound(p.invW[r], h)
		row[r] = c
		if c < low {
			m, low = r, c
		}
	}
	return m
}

// keyScratch is the scratch space of one startRange.
type keyScratch struct {
	mem    []byte    // n keys of keyCap bytes each
	key    [][]byte  // the runners' keys for the current shard, within mem
	tail   []uint64  // per key, the 8 bytes from the index on, digits zeroed
	row    []float32 // the current shard's bounds
	prefix []byte    // the current shard's prefix, with room for an id
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
