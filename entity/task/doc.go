// Package task is Tenure's durable task protocol on an object store:
// the task model and its pure transitions, the object layout,
// a Store doing conditional reads and writes on a storage.ObjectStore, and a
// Client any Go program can use to submit, inspect, cancel, replay, list and
// wait for tasks. The executor that claims and runs tasks lives in package
// entity and builds on this one.
//
// # Objects
//
// Keys are relative to the object store's prefix:
//
//	tasks/<group>/<index>/<id>.json              the task, its whole life
//	ready/<group>/<index>/<due>_<id>[.<ekey>]    an empty ready pointer
//
// <due> is the task's available_at in UTC to the millisecond, fixed-width
// (DueLayout, e.g. 20261122T170512.123Z), so a LIST of a shard's pointers
// returns them in due order; <ekey> is EntityKey(type, entity), present only
// for tasks addressed to an entity, so an executor can serialise an entity's
// tasks before reading any. A task's pointer key is a pure function of its
// shard, available_at, id, type and entity (Task.PointerKey).
//
// A task's shard is ShardOf(group, shards, type, entity, id): the hash of
// (type, entity) for entity tasks, so that an entity's tasks meet on the
// runner hosting it, else the hash of the id. The hash is part of the
// storage format and never changes.
//
// Ids and types are key-safe ([A-Za-z0-9_:-], 1 to 256 bytes); entity ids
// are any UTF-8 text without control characters (only their hash is in
// keys). Ids default to UUIDv7s (NewID), which sort by creation time.
//
// # Lifecycle
//
//	         ClaimFor            Complete
//	pending ─────────▶ running ───────────▶ completed
//	   ▲  ▲              │  │  Fail (permanent or attempts used)
//	   │  └──────────────┘  └──────────────────────▶ failed ──┐
//	   │   Fail (retry, backoff), Requeue (handoff)            │
//	   │   RequestCancel: pending → cancelled at once;         │
//	   │   running → cancel_requested, then FinishCancel       │
//	   └────────────────────── Replay ◀── cancelled ◀──────────┘
//
// Transitions are methods on *Task that change it in memory (no I/O) using
// an S3 time the caller passes in; each appends to the task's bounded
// history. Store.Write commits a change with If-Match on the ETag the
// caller read, so of two writers that read the same version exactly one
// wins (guarantee 4, fenced commits): a runner that lost a task cannot commit
// over its new owner. Every write increments Rev, so every write changes the
// body and with it the ETag, which S3 computes as the body's MD5.
//
// Claims carry the shard lock's epoch as a fencing token: a claim or
// takeover with an older epoch than the current claim's is refused
// (ErrStaleEpoch).
//
// A task keeps its pointer until it is terminal, while it runs included:
// the pointer is how a shard's new owner finds the tasks an old owner left
// running. A retry moves the pointer (write the new one, commit the task,
// delete the old one); a requeue keeps it; reaching a terminal status
// deletes it. An owner that finds a stale pointer (one its task no longer
// names) writes the task's current pointer again before deleting the stale
// one, so a writer that failed between the steps, or wrote them in the
// other order, cannot leave a task without a pointer.
//
// # Submit
//
// Client.Submit writes the pointer, then creates the task with
// If-None-Match, then wakes the shard's owner through a Waker, with a note
// carrying the task as written and its ETag (see FormatWakeNote), which
// spares the owner the read before its claim. A crash
// between the steps leaves at worst a pointer without a task, which the
// owner deletes; a task is never left without a pointer (guarantee 3). A
// caller-given id makes Submit idempotent.
//
// # Retention
//
// Finished tasks are not kept forever: Store.Purge deletes a shard's
// completed, failed and cancelled tasks that finished before a cutoff. The
// shard owner runs it every sweep interval with the cutoff now minus the
// retention (entity.Config.TaskRetention), and `tenure task purge` runs it
// on demand. Only what is known to be finished is deleted: pending and
// running tasks, objects that do not decode and keys that do not parse are
// kept. A task's finishing time is the later of its updated_at and the S3
// server's LastModified of its object (plus its one-second resolution), and
// the cutoff is compared in S3 time, so that a task is never deleted before
// it is certainly as old as the retention.
//
// A purge must not undo a concurrent Replay, the one change a finished task
// can still undergo. A completed task (or one failed as corrupt) is never
// written again, so it is deleted with a conditional DELETE on the ETag
// read. A failed or cancelled one is first marked Purging by
// compare-and-swap (Task.MarkPurging), which a replay that wrote first
// makes lose and which makes later replays refuse (ErrPurging); the marked
// version, which nobody may change, is then deleted. This relies on
// conditional PUTs only: VersityGW's conditional DELETE is not atomic (see
// storage.ObjectStore.DeleteIfMatch). See Store.Purge for the cost.
//
// A caller-given id is idempotent for as long as its task exists: once
// purged, the same id submits a new task.
//
// # Time
//
// Every task time is the object store's clock (Store.Now, from S3's Date
// headers), never the local wall clock, so that runners with skewed clocks
// agree on when a task is due and when a lease expires.
//
// # Failure
//
// Bad ids, types, entities and inputs give *ValidationError (ErrInvalid),
// malformed keys *KeyError (ErrMalformedKey), refused transitions
// *TransitionError, and a task object that cannot be decoded a
// *CorruptError (ErrCorrupt) together with a partial task that keeps the
// raw bytes, so an executor can fail it in place instead of dropping it or
// crashing (guarantee 6).
package task
