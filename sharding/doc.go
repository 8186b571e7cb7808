// Package sharding owns the mapping of shards to runners at run time: the
// rebalance loop that acquires and releases shard locks in the runner
// store, the reacquire retry window, and the set of shards this runner
// owns, gated by detachment. The assignment it acts on is computed by
// package sharding/placement (the deterministic weighted rendezvous
// assignment, pure and specified there).
//
// Every runner acts on its own view of the cluster — the runners and the
// lock holders, read from one revision-ordered stream of both
// (membership.go) — and on the assignment placement computes from it. Two
// properties make the runners agree without talking to each other: the
// view is always the state of etcd at some revision, never a lock change
// without the runner change that explains it (a polled store, s3coord,
// comes close: its listings are not snapshots, so a lock written while one
// ran can be missing from it until the next poll); and the assignment maps every
// state a hand-over passes through to the hand-over's end state. So a
// runner that has seen any revision of a hand-over moves only the shards
// the hand-over moves, straight to their new owners. A starting runner
// makes its first acquisition once the membership has settled
// (settle.go), so that runners started together each lock their final
// share at once; a shard held elsewhere is taken when the stream shows its
// lock deleted, not polled for (acquire.go). A lock our lease holds while
// nothing of ours runs on it (a release whose delete failed; on a polled
// store, a lock a listing missed) is released for its assignee
// (stray.go). The procedure is
// versioned by the cluster meta (ClusterProcedure reads it): a cluster
// keeps the one it was created with.
package sharding
