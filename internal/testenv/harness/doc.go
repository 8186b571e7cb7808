// Package harness builds the test clusters of every layer — sharding's
// managers, entity's hosts, runner's Runners, the integration tests'
// `tenure run` processes and the bench's runners — and holds the observers
// that judge them from outside.
//
// A layer's tests name the cluster (an etcd key prefix, an S3 bucket, the
// cluster meta) in a Spec, get stores and per-member etcd proxies from the
// Cluster, keep their nodes in Members, run each node's main function as a
// Run, and wait for convergence with Await. What starts a node stays in the
// layer: a thin adapter in its tests (package sharding's cluster_test.go,
// entity's env_test.go, runner's runner_test.go, integration's
// harness_test.go) or in internal/bench.
//
// The observers are keyed by storage.ShardID, runner id, epoch and times,
// and know no layer's types: a LockTimeline follows the shard locks in
// etcd (who held which shard when), a Ledger records ownership spans as
// the runners' handlers report them (no shard owned by two runners at
// once), a Recorder logs handler executions, and Transitions keeps a
// detachment machine's transitions. Each layer adapts its callbacks into
// them.
//
// The package imports neither "testing" nor the layers it serves (their
// internal tests import it): it is compiled into the tenure binary for
// `tenure bench`, and an import of sharding, entity or runner would be a
// cycle. Its functions return errors, for a test to fail on and the bench
// to report. The servers themselves come from package testenv (tests) or
// from the bench's own embedded or given infrastructure.
package harness
