// Package etcd implements storage.RunnerStore on etcd v3.
//
// Layout under the store's prefix (default "/tenure/default/"):
//
//	meta                   {shards, groups, hash, created_at}, written once
//	runners/<runner-id>    {id, addr, weight, groups, version, started_at}, on the runner lease
//	shards/<group>/<shard> {runner_id, acquired_at}, on the runner lease
//	config                 the dynamic config document
//	wake/<group>/<shard>   a wake-up note (the ready pointer a submitter just wrote), watched by the shard's owner; no lease
//
// A lock's identity is the lease it is bound to, not an address: acquire is
// txn(CreateRevision(k)==0) then Put(k, v, WithLease(l)); verify and release
// compare LeaseValue(k)==l. Every lock rides the runner lease, so a dead
// runner's locks vanish with it, and a lock key's CreateRevision is the
// shard's epoch: strictly increasing across holders.
//
// A Session renews its lease only when asked (Session.KeepAlive), once per
// call, on a stream of its own under clientv3.WithRequireLeader, so a member
// cut off from its leader fails fast rather than hanging. It reports raw
// facts (the send time read before sending, the answer's time and the TTL
// granted) and computes no deadline: the detachment machine does, from the
// send time, since the lease was renewed no earlier than the request left.
//
// Watches list first and then watch from the next revision; when the watch
// breaks (compaction, lost leader, disconnect) they list again and emit the
// difference, so consumers never miss a delete.
//
// Every call is bounded by the store's request timeout, but
// ShardLockHistory, an audit's read of etcd's whole history of the locks,
// which its caller bounds; errors are *storage.OpError values naming the
// operation, key and endpoints.
package etcd
