// Package sharding owns the mapping of shards to runners: the deterministic
// weighted rendezvous assignment, the rebalance loop that acquires and
// releases shard locks in the runner store, the reacquire retry window, and
// the set of shards this runner owns, gated by detachment.
package sharding
