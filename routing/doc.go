// Package routing keeps a caller's view of who owns each shard: the holder
// of the shard's lock, the lock's epoch (its fencing token), and the
// holder's runner record (where to reach it). A Table is fed by the
// membership stream (storage.MembershipReader.WatchMembership), so a call
// routes from memory with no etcd read of its own.
//
// The view follows the stream's contract: batches are applied whole and in
// order, and a listing replaces the view, so between batches the Table is
// the state of runners/ and shards/ at one revision of the coordination backend (Revision). A
// lock change is never seen before the runner change that explains it,
// which is why an owner found in the Table has its runner record too.
//
// The view is only as fresh as the stream: an owner read from it may have
// lost the shard since. The receiving runner, not the Table, is the
// authority: it refuses a call whose epoch is not its lock's, and the
// caller waits for the next holder with AwaitOwner instead of spinning.
//
// The Table also places entity types on shard groups: runners list the
// types they host in their records (storage.RunnerInfo.Types), and
// PlaceType answers which group's runners host a type, so that a caller
// routes a type to its group without naming one. Records without types
// (older runners) leave a type's group unknown, and the caller keeps its
// own.
package routing
