// Package schedule runs cron schedules on a Tenure cluster with nothing but
// S3 and the task protocol.
//
// A schedule is an S3 object, Key(shard, name) =
// "schedules/<group>/<index>/<name>.json", in the shard of its driver
// entity (ShardOf). It is driven by a chain of durable delayed tasks of the
// built-in type DriverType ("tenure:schedule"), entity = the schedule's
// name, one per tick and due at it, so the owner of the schedule's shard
// runs them; failover, takeover and fencing are the task protocol's.
//
// At tick T the driver reads the schedule: gone, of another generation, or
// paused, and the chain ends. Otherwise it fires T — submits the
// schedule's task with the id TaskID(name, generation, T) — when it
// reached T within the grace (DefaultGrace, WithGrace). Reached later, T
// is missed: CatchUpOnce fires the latest tick due instead, late, standing
// for all the missed ones; CatchUpSkip fires nothing. Then it submits the driver
// of the first tick after max(T, now) (DriverID, the same derivation) and
// completes. Because both ids are functions of (schedule, generation,
// tick), a driver run twice (a crash before its commit, a takeover) or two
// chains of one schedule (a Resume racing the chain) submit the same tasks
// again, and task.Client.Submit returns the existing ones: a tick fires at
// most once, never twice.
//
// Generations tell a schedule from an earlier one of the same name that
// was deleted: the generation is the creation time in Unix nanoseconds
// (S3 time), so a delete leaves no tombstone and the old chain stops at its
// next tick, which finds another generation (or none).
//
// Failover: ticks are missed for as long as the schedule's shard has no
// owner (the lease TTL after a crash), plus the task lease when the driver
// was running. A crash between the ready pointer and the object of the
// next driver leaves the pointer heading the driver entity's mailbox; the
// late run that follows re-submits that driver (same id), so the chain
// does not wait out the host's OrphanWait.
//
// Costs: a tick is one schedule GET, one S3 time read (usually cached), and
// two Submits (fired task and next driver: a pointer PUT and a conditional
// task PUT each), plus the driver task's own claim and commit.
//
// Metrics (WithRegistry): tenure_schedule_fires_total{outcome=on_time|late|
// skipped} and tenure_schedule_fire_lag_seconds. A driver run repeated
// after a crash does not count its fire twice (only a created task counts),
// but may count its skipped ticks again.
package schedule
