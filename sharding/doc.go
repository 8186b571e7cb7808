// Package sharding owns the mapping of shards to runners: the deterministic
// weighted rendezvous assignment, the rebalance loop that acquires and
// releases shard locks in the runner store, the reacquire retry window, and
// the set of shards this runner owns, gated by detachment.
//
// Every runner acts on its own view of the cluster — the runners and the
// lock holders, read from one revision-ordered stream of both
// (membership.go) — and on the assignment computed from it (assign.go).
// Two properties make the runners agree without talking to each other: the
// view is always the state of etcd at some revision, never a lock change
// without the runner change that explains it; and the assignment maps every
// state a hand-over passes through to the hand-over's end state. So a
// runner that has seen any revision of a hand-over moves only the shards
// the hand-over moves, straight to their new owners. The procedure is
// versioned by the cluster meta (procedure.go): a cluster keeps the one it
// was created with.
package sharding
