// Package shardkey is the rule that places an entity (type, id), or a task
// without one, on a shard: part of the storage format, shared by the task
// store (package entity/task), which files tasks under their shard, and the
// call transport (package messaging), which routes calls to the holder of
// the entity's shard. It imports nothing of the project but storage's
// ShardID, so that neither user has to import the other for it.
package shardkey
