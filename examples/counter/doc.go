// Command counter embeds a Tenure runner in a Go service.
//
// The service registers a stateful entity type, "counter": one instance per
// counter id, created on the id's first task with its total loaded from S3
// (entity.StatefulHandler), handling its tasks one at a time, in submission
// order. A task {"add": N} adds N to the
// count and returns the new total. The service also serves a small HTTP API
// of its own, POST /counters/{id}/add?n=N, which submits such a task with the
// runner's own client (Runner.Client), waits for its result and returns the
// total.
//
// It reads the runner configuration as `tenure run` does (a YAML file, by
// default ./.tenure-dev/tenure.yaml as `tenure dev` writes it, then
// TENURE_* environment variables, then flags), so it joins the cluster that
// `tenure dev --runners 0` starts. SIGTERM or Ctrl-C stops it gracefully:
// the HTTP server first, then the runner, which hands its shards over before
// it revokes its lease. A second signal exits at once.
//
// The total is durable entity state (entity.State): written to S3 with
// each task, before the task completes, and fenced by the shard's
// ownership, so it survives passivation, a shard's move, a crash and a
// restart of the whole cluster; see README.md.
package main
