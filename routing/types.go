package routing

import (
	"maps"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/storage"
)

// Placement by type: a runner's record lists the entity and task types it
// hosts (storage.RunnerInfo.Types) and the shard groups it serves, so the
// Table can answer which group an entity type lives in, and a caller need
// not name one. The index is kept up to date by every runner change rather
// than computed per call: a call asks for its type's group on its hot
// path, and a scan of every runner's types would cost it microseconds.
// Measured on the 2-core dev machine (BenchmarkPlaceType: 64 runners in 4
// groups, 16 types each, 2 parallel readers): 83 ns and no allocation per
// call, beside Owner's 124 ns.

// Hosting says what the view knows of the runners hosting an entity type.
type Hosting int

const (
	// HostingUnknown: no runner in the view lists the type, and either
	// some runner's record lists no types at all (a runner older than
	// placement by type, which may host it) or the view has no runner.
	// The caller's own group is the best guess, as before placement by
	// type.
	HostingUnknown Hosting = iota
	// Hosted: runners of the group returned list the type — or, when none
	// does now, did the last time any did (see PlaceType).
	Hosted
	// NotHosted: every runner in the view lists its types, none lists
	// this one, and none did since the Table started: no group can run
	// it.
	NotHosted
)

// String returns "unknown", "hosted" or "not hosted".
func (h Hosting) String() string {
	switch h {
	case Hosted:
		return "hosted"
	case NotHosted:
		return "not hosted"
	}
	return "unknown"
}

// anyGroup keys, in the type index, runners whose record lists no group:
// they serve every group of the cluster (as placement reads them).
const anyGroup = ""

// typeIndex is the runners' advertised types, indexed by type.
// Invariant: hosts is the sum of the contributions (addLocked) of the
// runners in Table.runners; untyped counts those that list no type.
type typeIndex struct {
	// hosts: type → group → how many runners serving the group list the
	// type (anyGroup for runners serving every group).
	hosts map[string]map[string]int
	// last: type → the groups that hosted it when its last host left.
	// It outlives the hosts: when a group's runners all restart at once,
	// its records vanish for a moment, and its callers should wait for a
	// holder in that group (as they would without placement by type)
	// rather than fail as if the type were never deployed.
	last map[string]map[string]struct{}
	// untyped counts runners whose record lists no types.
	untyped int
}

func newTypeIndex() typeIndex {
	return typeIndex{hosts: map[string]map[string]int{}, last: map[string]map[string]struct{}{}}
}

// reset forgets the runners, before a listing adds them again; each type's
// groups are remembered as last, as if its hosts had left.
func (x *typeIndex) reset() {
	for typ, byGroup := range x.hosts {
		x.remember(typ, byGroup)
	}
	x.hosts = make(map[string]map[string]int, len(x.hosts))
	x.untyped = 0
}

func (x *typeIndex) remember(typ string, byGroup map[string]int) {
	last := make(map[string]struct{}, len(byGroup))
	for g := range byGroup {
		last[g] = struct{}{}
	}
	x.last[typ] = last
}

// add counts r's types in (delta 1) or out (delta -1).
func (x *typeIndex) add(r storage.RunnerInfo, delta int) {
	if len(r.Types) == 0 {
		x.untyped += delta
		return
	}
	groups := r.Groups
	if len(groups) == 0 {
		groups = []string{anyGroup}
	}
	for _, typ := range r.Types {
		byGroup := x.hosts[typ]
		if byGroup == nil {
			if delta < 0 {
				continue // not counted in: nothing to count out
			}
			byGroup = map[string]int{}
			x.hosts[typ] = byGroup
		}
		var before map[string]int
		if delta < 0 && len(byGroup) <= len(groups) {
			before = maps.Clone(byGroup) // this runner may be its last host
		}
		for _, g := range groups {
			if n := byGroup[g] + delta; n > 0 {
				byGroup[g] = n
			} else {
				delete(byGroup, g)
			}
		}
		if len(byGroup) == 0 {
			delete(x.hosts, typ)
			if before != nil {
				x.remember(typ, before)
			}
		}
	}
}

// place picks a group among groups hosting typ: prefer when it is one of
// them (or a runner serving every group hosts it), else the lexically
// first.
func place[V any](groups map[string]V, prefer string) string {
	if _, ok := groups[prefer]; ok && prefer != anyGroup {
		return prefer
	}
	if _, ok := groups[anyGroup]; ok && prefer != "" {
		return prefer
	}
	first, found := "", false
	for g := range groups {
		if g != anyGroup && (!found || g < first) {
			first, found = g, true
		}
	}
	return first
}

// PlaceType returns the shard group an entity of type typ lives in, as the
// runners' records say (storage.RunnerInfo.Types and Groups), and what the
// view knows of it:
//
//   - Hosted: the group served by runners listing typ. When several groups
//     host it, prefer if it is one of them (a caller passes its own
//     group), else the lexically first: every caller with the same prefer
//     and view picks the same group. A runner whose record lists no group
//     serves every group, prefer included. When no runner lists typ now
//     but some did since it last had none, the group is picked among
//     theirs: a group whose runners all restart keeps its types. group is
//     empty only when prefer is empty and only runners serving every group
//     host typ.
//   - HostingUnknown: group is prefer. No runner lists typ, and some
//     runner's record lists no types (an older runner, which may host it),
//     or the view has no runner yet.
//   - NotHosted: group is prefer. Every runner lists its types and none
//     ever listed typ while the Table ran.
//
// A runner listing typ but serving no group prefer names is not consulted
// about prefer: the records, not the caller, say where a type lives.
func (t *Table) PlaceType(typ, prefer string) (group string, h Hosting) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if byGroup := t.types.hosts[typ]; len(byGroup) > 0 {
		return place(byGroup, prefer), Hosted
	}
	if last := t.types.last[typ]; len(last) > 0 {
		return place(last, prefer), Hosted
	}
	if t.types.untyped > 0 || len(t.runners) == 0 {
		return prefer, HostingUnknown
	}
	return prefer, NotHosted
}

// TypesGeneration grows whenever a runner record changes: what PlaceType
// answered holds while it stays the same, so a caller on a hot path may
// keep the answer (a lock-free read) rather than ask again. It grows
// before the change is applied, and a caller reads it before PlaceType:
// an answer kept under a generation is never newer than the view it
// names, at worst older, and then asked again.
func (t *Table) TypesGeneration() uint64 { return t.typesGen.Load() }

// GroupOf returns the group hosting typ, as PlaceType picks it with
// prefer; ok is false unless PlaceType says Hosted.
func (t *Table) GroupOf(typ, prefer string) (group string, ok bool) {
	g, h := t.PlaceType(typ, prefer)
	return g, h == Hosted
}

// HostGroups returns the groups whose runners list typ now, sorted; "*"
// stands for runners whose record lists no group (they serve every
// group). It is for diagnostics: a call routes with PlaceType.
func (t *Table) HostGroups(typ string) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]string, 0, len(t.types.hosts[typ]))
	for g := range t.types.hosts[typ] {
		if g == anyGroup {
			g = "*"
		}
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}

// TypeGap is a runner serving a group whose record lacks types that other
// runners of the group list. Any runner of a group may hold any of its
// shards, so entities of a missing type whose shard it holds fail with
// unknown type: the group's runners should all host the same types.
type TypeGap struct {
	// Runner is the runner's id.
	Runner string
	// Missing are the types other runners of the group list and it does
	// not, sorted.
	Missing []string
}

// TypeGaps returns the runners among runners serving group (listing it,
// or no group at all) whose types lack some that another of them lists,
// sorted by runner id; nil when they agree. A runner whose record lists
// no types (older than placement by type) is left out on both sides: its
// types are unknown. It is for a runner's start-up warning and for
// status pages; calls do not consult it.
func TypeGaps(group string, runners []storage.RunnerInfo) []TypeGap {
	var serving []storage.RunnerInfo
	all := map[string]struct{}{}
	for _, r := range runners {
		if len(r.Types) == 0 || (len(r.Groups) > 0 && !slices.Contains(r.Groups, group)) {
			continue
		}
		serving = append(serving, r)
		for _, typ := range r.Types {
			all[typ] = struct{}{}
		}
	}
	var gaps []TypeGap
	for _, r := range serving {
		var missing []string
		for typ := range all {
			if !slices.Contains(r.Types, typ) {
				missing = append(missing, typ)
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			gaps = append(gaps, TypeGap{Runner: r.ID, Missing: missing})
		}
	}
	slices.SortFunc(gaps, func(a, b TypeGap) int { return strings.Compare(a.Runner, b.Runner) })
	return gaps
}

// TypeGaps returns TypeGaps(group, runners) over the runners in the
// view.
func (t *Table) TypeGaps(group string) []TypeGap {
	t.mu.RLock()
	runners := make([]storage.RunnerInfo, 0, len(t.runners))
	for _, r := range t.runners {
		runners = append(runners, r)
	}
	t.mu.RUnlock()
	return TypeGaps(group, runners)
}
