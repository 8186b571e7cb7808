package placement

import "github.com/tenurehq/tenure/storage"

// The current owners of a group's shards, as runner indices: read from the
// Assignment once, before the start, so that the start can hash each held
// pair while it has the key at hand (ownHash), and the keep and the walk
// need no map lookups.

// owners sets p.owner[k], for every shard k of the group, to the eligible
// runner that holds it in current, or -1 (nobody, or a runner that left,
// drained or does not serve the group).
func (p *placer) owners(shards int, current Assignment) {
	p.owner = resizeInt32s(p.owner, shards)
	for k := range p.owner {
		p.owner[k] = -1
	}
	p.ownHash = p.ownHash[:0]
	if len(current) == 0 {
		return
	}
	if cap(p.ownHash) < shards {
		p.ownHash = make([]uint64, shards)
	}
	p.ownHash = p.ownHash[:shards]
	index := p.runnerIndex()
	if len(current) > ownersScanFactor*shards {
		// Mostly other groups: look up this group's shards instead of
		// reading them all.
		for k := range shards {
			p.owner[k] = index(current[storage.ShardID{Group: p.group, Index: k}])
		}
		return
	}
	for s, id := range current {
		if s.Group == p.group && s.Index >= 0 && s.Index < shards {
			p.owner[s.Index] = index(id)
		}
	}
}

// runnerIndex returns a function that finds an eligible runner by id, -1
// if there is none: by comparing the id with each when there are few
// (cheaper than hashing it: 16,384 owners of 3 runners read in 0.38 ms,
// not 0.49), by a map otherwise.
func (p *placer) runnerIndex() func(id string) int32 {
	if len(p.ids) <= 8 {
		return func(id string) int32 {
			for r, x := range p.ids {
				if x == id {
					return int32(r)
				}
			}
			return -1
		}
	}
	index := make(map[string]int32, len(p.ids))
	for r, id := range p.ids {
		index[id] = int32(r)
	}
	return func(id string) int32 {
		if r, ok := index[id]; ok {
			return r
		}
		return -1
	}
}

// ownersScanFactor: owners reads every entry of current when it has at
// most this many per shard of the group; an entry read in a scan costs a
// fraction of a lookup by ShardID, which hashes the group name.
const ownersScanFactor = 4

// held returns, per eligible runner, the shards of the group it owns (see
// owners), in index order.
func (p *placer) held() [][]int {
	held := make([][]int, len(p.ids))
	counts := make([]int, len(p.ids))
	for _, r := range p.owner {
		if r >= 0 {
			counts[r]++
		}
	}
	for r, c := range counts {
		held[r] = make([]int, 0, c)
	}
	for k, r := range p.owner {
		if r >= 0 {
			held[r] = append(held[r], k)
		}
	}
	return held
}

// hashHeld records in p.ownHash the hash of shard k's pair with the runner
// that holds it, if any, from the keys of the current shard, and reports
// whether shard k is held. Step 6a ranks a runner's held shards by these
// hashes (keepBest), which saves building and hashing each key again. The
// key was hashed in the row just before, so it is in cache and its bytes
// are no longer in flight. (Whole rows keep the hash as they compute it:
// see rowBounds.)
func (p *placer) hashHeld(k int, ks *keyScratch) bool {
	r := p.heldBy(k)
	if r >= 0 {
		p.ownHash[k] = hashBytes(ks.key[r])
	}
	return r >= 0
}

// startBest returns the best pair of shard k, as the start computes it
// for the shards nobody holds. For a held shard the start leaves it to
// the walk, which needs it only if the holder gives the shard up: with a
// join most shards stay, and their best pairs, a logarithm or more each,
// would be computed for nothing. The start's bounds are kept until the
// walk ends, so the pair is the one the start would have found.
func (p *placer) startBest(k int) scoredPair {
	r, s := p.bestOf(k, -1)
	return scoredPair{score: s, runner: r, shard: k}
}

// heldBy returns the runner that holds shard k, or -1 (also when nothing
// is held: p.ownHash is then empty).
func (p *placer) heldBy(k int) int {
	if len(p.ownHash) == 0 {
		return -1
	}
	return int(p.owner[k])
}
