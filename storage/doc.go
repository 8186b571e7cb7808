// Package storage defines Tenure's two storage ports and the types they
// exchange.
//
// The object store (ObjectStore) holds durable tasks: conditional writes
// (create-if-absent, replace-if-match) are the only synchronisation Tenure
// needs on it, and its responses carry the authoritative clock used for task
// timing. The runner store (RunnerStore) holds cluster membership: runner
// registrations bound to a lease, shard locks bound to that same lease,
// watches, the cluster meta record and the dynamic config document. It is
// composed of narrow ports (ClusterMetaStore, Registrar, MembershipReader,
// ShardLockReader, DynamicConfig, Waker, WakeWatcher) so that each consumer
// depends on only the part it uses.
//
// Adapters live in sub-packages: storage/s3 and storage/memstore implement
// ObjectStore; storage/etcd implements RunnerStore on etcd, and
// storage/s3coord on an ObjectStore's conditional writes alone. Every
// adapter must pass the conformance suites in storage/storagetest.
//
// Errors returned by adapters are *OpError values naming the operation, the
// key and the endpoint, and wrap one of the sentinel errors below so callers
// can branch with errors.Is.
package storage
