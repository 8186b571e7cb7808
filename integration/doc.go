// Package integration holds multi-runner and multi-process tests of Tenure
// against real etcd and a real S3 server, with injected faults, and the
// benchmarks built on them.
package integration
