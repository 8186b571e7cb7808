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
// paused, and the chain ends. Otherwise, when it reached T within the
// grace (DefaultGrace, WithGrace), it fires T — submits the schedule's
// task with the id TaskID(name, generation, T) — and submits the driver of
// the next tick (DriverID, the same derivation). Reached later, T is late
// and the schedule's CatchUp decides:
//
//   - CatchUpAll (the default) fires every due tick from T on, in tick
//     order, in a batch of at most MaxBatch ticks that ends at a multiple
//     of MaxBatch seconds or after a third of the driver's task lease,
//     and submits the driver of the first tick not fired, due at once
//     while the chain is behind: a chain back after an outage catches up
//     a batch per driver run. Ticks older than the schedule's
//     CatchUpWindow (DefaultCatchUpWindow) are missed: counted and logged,
//     not fired. So every tick within the window fires exactly once,
//     including those due while the schedule's shard had no owner.
//   - CatchUpOnce fires the latest late tick instead, late, standing for
//     all the late ones; CatchUpSkip fires none. Both go on with the
//     first tick within the grace.
//
// Because the ids are functions of (schedule, generation, tick), a driver
// run twice (a crash before its commit, a takeover) or two chains of one
// schedule (a fork, a Resume racing the chain) submit the same tasks
// again, and task.Client.Submit returns the existing ones: a tick fires at
// most once, never twice. Forks of a chain meet on a common driver id
// (see decide), and the ticks of an @every schedule lie on one grid from
// its creation (Schedule.Next), so that chains of one schedule always can.
// Exactly once holds while the fired tasks are kept: the window is at most
// MaxCatchUpWindow, the cluster's default task retention.
//
// Generations tell a schedule from an earlier one of the same name that
// was deleted: the generation is the creation time in Unix nanoseconds
// (S3 time), so a delete leaves no tombstone and the old chain stops at its
// next tick, which finds another generation (or none).
//
// Failover: ticks are late for as long as the schedule's shard has no
// owner (the lease TTL after a crash), plus the task lease when the driver
// was running; under CatchUpAll the new owner fires them then. A crash
// between the ready pointer and the object of the next driver leaves the
// pointer heading the driver entity's mailbox; the repeated run that
// follows re-submits that driver (same id), so the chain does not wait out
// the host's OrphanWait.
//
// Costs: a tick is one schedule GET, one S3 time read (usually cached), and
// two Submits (fired task and next driver: a pointer PUT and a conditional
// task PUT each), plus the driver task's own claim and commit; a catch-up
// batch is one Submit per tick plus one driver run per batch.
//
// Metrics (WithRegistry): tenure_schedule_fires_total{outcome=on_time|late|
// skipped|missed} and tenure_schedule_fire_lag_seconds. A driver run
// repeated after a crash does not count its fires twice (only a created
// task counts), but may count its skipped and missed ticks again.
package schedule
