// Package bench runs the scenarios of `tenure bench`: a local cluster on
// loopback (embedded etcd and an embedded VersityGW S3 gateway, or given
// endpoints), runners in this process or as child processes of the tenure
// binary, and figures that can be compared from run to run.
//
// Scenarios:
//
//   - failover: three runner processes; SIGKILL one and time until every
//     shard it held is locked by the others (also as a ratio to the lease
//     TTL).
//   - handoff: the same with SIGTERM: a graceful stop hands the shards over.
//   - detach: a runner cut off from etcd by a TCP proxy (blackhole) while
//     a task handler runs; the margin it kept, measured from outside: the
//     lease's expiry as the bench's own etcd client sees it minus the
//     moment the handler saw its context cancelled (must be positive).
//   - throughput: no-op tasks per second with one and three runners.
//   - latency: submit → handler start, one task at a time, with wake-ups.
//   - s3cost: S3 requests per completed task by operation, counted on the
//     wire by counting proxies (internal/s3count), the runners' requests
//     per minute under load and idle, and monthly request-cost estimates
//     (a workload's, and the idle 3-runner, 64-shard cluster's).
//   - assign: compute time of placement.Assign and Reassign (package
//     sharding/placement).
//   - call: entity calls from a closed loop of callers inside one runner's
//     process to echo entities of two runner processes (remote) or of its
//     own runner (local): calls/s and latency by callers; then errors and
//     unavailability while a runner process is stopped (SIGTERM) or killed
//     (SIGKILL) under 64 callers.
//   - scale: N runner processes (3, 10, …) over 4096 shards, every
//     listener on an address the bench chose: time from a cold start to
//     the balanced assignment (placement.Reassign over the registered
//     runners, read from etcd), a SIGTERM and a SIGKILL until the victim's
//     shards are re-owned, and the idle cluster's etcd requests/s (etcd's
//     own counters) and S3 requests/s (on the wire).
//
// Options.Coordination picks the runners' coordination backend: etcd (the
// default) or s3, where the runners register, lock shards and wake each
// other through conditional writes in the bucket and no etcd is started.
// The bench follows the cluster through a coordination store of its own
// (on S3, on its own connection, polling at the runners' shortest
// interval), never through a runner's connection, so that its reads are
// not counted as the runners' requests; on S3, s3cost's and scale's S3
// counts include the runners' coordination requests. Scenarios that exist
// only on etcd (detach) are reported as skipped on S3.
//
// Every wait is bounded, and every runner, child process and server the
// run starts is stopped when it ends, fails or is interrupted.
package bench
