// Package placement computes which runner owns each shard: the
// deterministic weighted rendezvous assignment that every runner of a
// cluster computes on its own and that they must agree on bit for bit.
//
// Assign places every shard from the runners alone (a cold start);
// Reassign places them from the runners and the current owners, keeping
// shards with their owners while those stay within their load band, so
// that a join or a leave moves few shards and every state a hand-over
// passes through maps to the hand-over's end state. The procedure is
// versioned (Procedure, procedure.go): a cluster records the one it was
// created with in its meta (HashName names the current one), and
// ProcedureNamed finds it again, so that runners of different versions
// compute the same owners or refuse to share a cluster.
//
// The procedure is specified exactly, step by step, at the top of
// assign.go, so that another implementation can reproduce it; hash.go holds
// the scoring (XXH64 and a portable logarithm), the other files the
// placement steps.
//
// The package is pure: no I/O, no clock, no state between calls. Its
// inputs are the runners as Candidates and the current owners as an
// Assignment; reading them from the runner store, and acting on the
// result, is the sharding package's Manager.
package placement
