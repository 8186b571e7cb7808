// Package integration holds multi-runner and multi-process tests of Tenure
// against real etcd and a real S3 server, with injected faults, and the
// benchmarks built on them.
//
// TestSoak runs runner processes under load while faults of every kind are
// injected, then audits the run from outside: the tasks' handler is a
// recorder in the test process, shard locks come from the test's own etcd
// watch, every submit is accounted for by the id the load chose (one whose
// outcome was unknown is resolved by reading the task), and every accepted
// task is read back from S3 with its history. Its length, runner count and
// fault rate come from the TENURE_SOAK_* environment variables (make soak);
// RELIABILITY.md describes it and records a run.
package integration
