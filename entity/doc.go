// Package entity hosts shard entities, Tenure's actors keyed by (type, id),
// on the shards this runner owns, and executes the durable tasks (package
// entity/task) addressed to them.
//
// # Hosting
//
// Host implements sharding.Handler. For every shard the runner acquires it
// starts an executor that discovers the shard's due tasks, claims each one
// by compare-and-swap on its S3 object (with the shard's epoch as a fencing
// token), runs it, and commits the outcome by compare-and-swap. Every
// context a handler sees derives from the shard's ownership context, which
// derives from the runner's attachment context: a detachment or a lost
// shard cancels every handler at once, and no claim, lease renewal or commit
// is written after that. A planned handoff (rebalance, drain) waits for the
// handlers to stop and puts their tasks back to pending, while the lock is
// still held, so the successor starts them at once. It also runs the
// shard's entities' OnStop hooks before the lock goes: the successor sees
// every effect of a hook that returns within the interrupt timeout.
//
// After any interruption (detachment, lost lock, stop, handoff) the handlers
// get Config.InterruptTimeout to return; those still running then are
// counted (tenure_tasks_interrupt_overruns_total) and named in the log, and
// their tasks are never started again on this runner while they run. On
// stop the runner revokes its lease only after its handlers have returned
// (or the timeout has passed), since the revocation frees its locks at once.
//
// # Takeover
//
// A task a previous owner left running is taken over by the new owner at
// once only if its claim says its holder enforced detachment
// (task.Claim.Enforced): such a holder stops the attempt before its runner
// lease can expire, because the attempt stays bound to the detachment
// decision it was claimed under (detachment.Enforcement), even if the
// runner's mode changes afterwards. A claim made in observe or off mode,
// whose holder keeps running when cut off from etcd, is respected until its
// lease lapses in S3 time; its holder's renewals push it for as long as the
// attempt runs. So single execution holds in every mix of modes a staged
// rollout reaches, and across a mode switch during a partition.
//
// A running attempt's claim is renewed every TaskLease/3 (sooner when the
// S3 clock's uncertainty leaves less time). A guard on the local clock
// cancels the handler half a renewal period before the claim could lapse
// if renewals have failed, even when S3 and its clock cannot be reached; a
// renewal refused because the task changed hands cancels it at once.
//
// # Entities
//
// Tasks that name an entity run one at a time per entity, in submission
// order, on one in-memory instance created by the type's factory on its
// first task; instances are passivated after Config.MaxIdle without work and,
// least recently used first, beyond Config.MaxResident. Tasks without an
// entity run concurrently. Concurrency is bounded per shard and per runner.
//
// # Durable state
//
// A type registered with Stateful keeps a State per entity in one S3
// object (package entity/state), loaded and fenced with the shard lock
// epoch when an instance is activated, before its factory and OnStart run,
// and written with conditional writes only: a runner that lost the shard
// can never overwrite its successor's state (ErrStateFenced). A task's
// saved state is written with the task's id before its completion is
// committed, so a task's effect on the state is exactly once; State's doc
// says what is durable when a handler returns.
//
// An entity's order holds under faults: a task put back for later keeps its
// place at the head of its entity's mailbox, and the entity's later tasks
// wait for it. That covers a task waiting for a previous holder's claim to
// lapse, a store call that failed, a commit abandoned after an outage of a
// task lease, a retry waiting out its backoff, and a ready pointer whose
// object the submitter has not written yet (looked at again with backoff
// for Config.OrphanWait, rather than at the next reconciliation). That
// wait counts from the pointer's write by the S3 clock, so a failed
// submission holds its entity once, not again at every ownership of its
// shard.
//
// # Discovery and wake-ups
//
// An executor lists its shard's ready pointers when it acquires the shard
// (this is also when it takes over tasks a previous owner left running) and
// then only as a safety net for lost wake-ups: Config.ReconcileInterval
// after activity (a wake-up, a task start, a listing that found pointers no
// wake-up announced), and, while the shard stays idle, after twice the
// previous wait each time, up to Config.ReconcileMaxInterval (default 1h),
// plus up to 10% jitter. A task whose wake-up was lost therefore starts
// within the shard's current wait, at most 1.1 × ReconcileMaxInterval after
// its submission; tenure_tasks_reconcile_found_total counts such tasks.
// While the wake-up watch is down, and after a listing that failed, the
// executor lists every ReconcileInterval. New work reaches it through
// wake-ups: a submitter bumps the shard's etcd key wake/<group>/<index> with
// the task's pointer key, and the owner, watching the keys of the shards it
// owns, queues the task without an S3 LIST. We chose an etcd key bump over
// an HTTP call to the owner because it needs no routing: the submitter does
// not have to know who owns the shard or follow it across handoffs (whoever
// owns the shard watches the key, and a new owner lists on acquisition), it
// works through the one dependency every runner already has, and etcd
// delivers the bumps in commit order, so one submitter's tasks for an entity
// are queued in submission order. The cost is one small etcd write per
// submission. A submission's note also carries the task object as written
// and its ETag (task.FormatWakeNote), so that the owner claims it with a
// write conditional on that ETag without reading it first; a stale hint
// loses that write (412) and the owner reads the task, as it does for a
// note without a hint (see fromHint in claim.go).
//
// # Retention
//
// Finished tasks do not pile up: while it owns a shard (attached, holding
// its lock), a runner deletes the shard's completed, failed and cancelled
// tasks that finished more than Config.TaskRetention ago (default 7 days;
// 0 keeps them forever), by the rule task.Store.Purge shares with `tenure
// task purge`. Pending and running tasks are never deleted, a task that
// might be younger than the retention is kept (the cutoff is the earliest
// the S3 clock may read, minus the retention, compared with the S3
// server's own LastModified and with the task's updated_at), and a replay
// racing the deletion is never undone. Tasks an executor failed as corrupt
// (their raw bytes kept) are failed tasks and follow the retention:
// inspect them within it, or set it to 0. An object that does not decode
// and was never failed by an executor is kept.
//
// The sweep runs beside the shard's loop, in bounded passes (at most 1000
// objects read and 10000 keys listed, resumed a second later while a
// backlog lasts) at most four shards of a runner at a time, every
// Config.TaskSweepInterval (default TaskRetention/24 within [1s, 1h], plus
// up to 10%);
// a new owner's first pass comes at a random point of its second reconcile
// interval. Each pass is counted in tenure_tasks_sweeps_total, its
// deletions in tenure_tasks_purged_total{status}, and a pass that deleted
// something logs one line. Its cost:
//
//   - per idle shard: one LIST per sweep interval (two when the shard holds
//     over 1000 tasks): task ids are UUIDv7s, which sort by creation time,
//     so the listing stops at the first task created after the cutoff and
//     goes on only past those created up to now. What it cannot skip so is
//     listed every pass, one LIST per 1000: tasks with caller-given ids,
//     which sort anywhere, and unfinished tasks created before the cutoff.
//   - per finished task, once, when it is deleted: one GET and one DELETE
//     if it completed; one GET, one PUT and one DELETE if it failed or was
//     cancelled (the PUT marks it Purging by compare-and-swap, so that a
//     replay is never undone; see task.Store.Purge); plus its share of a
//     LIST (1/1000). Tasks written too recently are skipped on their
//     listed LastModified, without a GET. The happy path of a task (at most
//     4 PUT-class requests, 1 GET, 1 DELETE, no LIST) is unchanged: the
//     sweep adds its deletion afterwards.
//   - per unfinished task last written more than the retention ago (one
//     scheduled further ahead, or left pending for a type no runner
//     handles): one GET per ownership of its shard, remembered by ETag
//     (up to 10000 per shard) so later passes skip it.
//
// Deleting is safe whoever does it; owning the shard only makes one runner
// do it. The sweep's requests run under the ownership context: a lost
// shard or a detachment cancels them, and a detached runner, which owns
// nothing, sweeps nothing.
//
// No S3 lifecycle rule is offered in its place. A prefix-and-age rule on
// tasks/ counts age from an object's last write, so it would delete
// pending tasks scheduled further ahead than its age, and tasks waiting for
// a runner that handles their type. A rule filtered on a tag written with
// the finishing PUT (no extra request) would need tags on the port and pay
// tag storage, and expiration is not conditional on the version the rule
// evaluated: a failed task replayed as it expires could lose its replay.
// Only completed tasks, never rewritten, could safely expire that way, and
// VersityGW, the embedded server, implements no lifecycle rules to test
// such a rule against.
//
// # Messages
//
// Host.Deliver runs a call (request → reply) or a send (one-way) addressed
// to an entity (type, id), for the transport (package messaging) or a
// local caller. What it guarantees:
//
//   - The gate of tasks: a message runs only on the executor of its shard
//     while this runner holds the shard's lock under the epoch the caller
//     routed on (any, if 0) and its detachment decision is attached. A
//     refusal is a *RefusedError (not-owner with the epoch held, or 0;
//     not-attached; shard-moving during a planned release) and means the
//     handler did not run, so the caller may route the message again.
//   - Turns with tasks: the entity's tasks and messages share its mailbox
//     and its resident instance (OnStart on the first of either, idle
//     passivation, LRU), and run one at a time: a message never overlaps a
//     task or another message of its entity, with one exception: for a
//     type made by Define, calls and sends of operations marked ReadOnly
//     (Definition.IsReadOnly) share a turn, running concurrently with each
//     other and never with a writing message or any task of the entity. A
//     read-only message finding only readers running joins them if nothing
//     waits and no task is ready; otherwise it waits like any message. A
//     message finding the mailbox free runs at once on the caller's
//     goroutine; otherwise it waits its turn, first come first served, with
//     turns alternating between waiting messages and ready tasks so that
//     neither starves. One sender's sends and calls run in the order sent.
//   - Bound to the decision: messages have no S3 fence, so in every
//     detachment mode (observe and off included) a detach cancels the
//     running ones and refuses the others. A lost shard does the same. In
//     a planned release the running ones finish, the waiting ones are
//     refused as shard-moving, and ShardReleasing waits for the running
//     ones (within its timeout, overruns counted as for tasks) before the
//     lock goes.
//   - At most once: a message is not stored. A call's handler runs under
//     the caller's context (deadline and cancellation included); a call
//     whose context has ended is not started. A send runs after Deliver
//     returns, under its own context bounded by Config.SendTimeout; its
//     failure is logged. Durable, retried delivery is the task path.
//
// An instance that implements Receiver gets messages in Receive; any other
// gets them in Handle, as a task built from the message (id "call-" and 32
// random hex digits, one attempt, the body as its input, which must then
// be JSON), and tells them from tasks with CallFrom. A handler that panics returns a *PanicError and
// its instance is discarded (StopFailed), for messages and tasks alike.
// Messages are counted in tenure_entity_messages_total{kind,outcome} and
// timed in tenure_entity_message_duration_seconds{kind}.
//
// # Inside
//
// A shard executor (shard.go) is one ownership of a shard, put together
// from parts that each keep one state machine, its allowed transitions
// written next to it and enforced by the method that moves it:
//
//   - scheduler (scheduler.go, turn.go, mailbox.go): the due heap fed by
//     listings and wake-ups, the entity mailboxes and their turns
//     (turnState: free, queued, task, message, reading), the shard's
//     slots;
//   - pipeline (claim.go, execute.go, commit.go): one task's attempt,
//     look and claim → execute and renew → commit (attemptStage), which
//     the scheduler sees only as a taskRunner;
//   - residency (resident.go, statehost.go): instances, their durable
//     state, passivation and eviction;
//   - messenger (deliver.go): calls and sends on top of the turns;
//   - the lifecycle (stop.go): how the ownership ends (fate: handoff or
//     loss) and the executor's phase (shardPhase: running, closing,
//     stopping, stopped).
//
// # Failure
//
// A handler error fails the attempt; Permanent marks it final, otherwise the
// task is retried with exponential backoff (its available_at moves, in S3
// time) until its attempts run out, and then it is failed with its error
// history kept. A panic counts as a failed attempt. A task whose object does
// not decode is moved to failed with its raw bytes kept in the object, and
// its shard carries on. A task whose type has no handler on this runner is
// left pending and counted (tenure_entity_tasks_unhandled_total), so that a
// rolling deployment that adds a type loses nothing: it runs once its shard
// lands on a runner that knows the type.
package entity
