package placement

import (
	"errors"
	"fmt"
)

// Procedure is a version of the assignment procedure. A cluster's meta
// names the one it uses (storage.ClusterMeta.Hash), because every runner
// must compute the same owners: a runner that knows the procedure a cluster
// was created with uses it, so that a cluster can be upgraded runner by
// runner; a new cluster gets the current one (HashName).
type Procedure int

const (
	// ProcedureV1, "xxhash64-rendezvous-sticky/v1", is the first procedure.
	// It shares steps 1–4 of the specification (see assign.go) but places
	// a cold start by the pair walk within floor and ceiling, and from
	// current owners keeps each owner's shards up to its hi, places the
	// rest and lifts runners below their lo by taking from others. That is
	// not stable along a hand-over: a state in which some of the moves a
	// change calls for are done can call for others (a runner that has
	// handed shards over keeps more of the ones still to go, and a
	// newcomer then lifts different ones), so shards may move twice. It is
	// kept only for clusters created with it.
	ProcedureV1 Procedure = 1
	// ProcedureV2, "xxhash64-rendezvous-sticky/v2", is the procedure the
	// specification in assign.go describes: target counts first, then
	// keep and walk, which every intermediate state of a hand-over maps to
	// the same end state.
	ProcedureV2 Procedure = 2
)

// HashName names the current procedure (ProcedureV2) for the meta of new
// clusters. Any change to the procedure that can change an owner must
// change the name, so that runners of different versions refuse to share a
// cluster instead of disagreeing about owners.
const HashName = "xxhash64-rendezvous-sticky/v2"

// ErrUnknownProcedure is returned for a cluster meta whose hash names no
// procedure this version knows: a newer version created the cluster.
var ErrUnknownProcedure = errors.New("placement: unknown assignment procedure")

// Name returns the procedure's name as recorded in the cluster meta.
func (p Procedure) Name() string {
	switch p {
	case ProcedureV1:
		return "xxhash64-rendezvous-sticky/v1"
	case ProcedureV2:
		return HashName
	}
	return fmt.Sprintf("unknown procedure %d", int(p))
}

// String returns Name.
func (p Procedure) String() string { return p.Name() }

// ProcedureNamed returns the procedure a cluster meta's hash names.
func ProcedureNamed(name string) (Procedure, error) {
	for _, p := range []Procedure{ProcedureV2, ProcedureV1} {
		if p.Name() == name {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w %q: this version knows %q and %q; upgrade the runner", ErrUnknownProcedure, name, ProcedureV2.Name(), ProcedureV1.Name())
}

// Assign is the package's Assign under procedure p.
func (p Procedure) Assign(groups []string, shardsPerGroup int, runners []Candidate) Assignment {
	return p.Reassign(groups, shardsPerGroup, runners, nil)
}

// Reassign is the package's Reassign under procedure p (an unknown p is
// treated as the current procedure).
func (p Procedure) Reassign(groups []string, shardsPerGroup int, runners []Candidate, current Assignment) Assignment {
	if shardsPerGroup <= 0 || len(groups) == 0 {
		return make(Assignment)
	}
	out := make(Assignment, min(shardsPerGroup, maxSizeHint/len(groups))*len(groups))
	cands := mergeCandidates(runners)
	pl := placer{proc: p}
	seen := make(map[string]bool, len(groups))
	for _, g := range groups {
		if seen[g] {
			continue
		}
		seen[g] = true
		pl.assignGroup(out, g, shardsPerGroup, cands, current)
	}
	return out
}
