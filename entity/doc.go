// Package entity hosts shard entities, Tenure's actors keyed by (type, id),
// on the shards this runner owns, and implements the durable task protocol
// on the object store that feeds them.
package entity
