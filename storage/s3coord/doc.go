// Package s3coord is the runner-storage port (storage.RunnerStore) on an
// object store's conditional writes alone (storage.ObjectStore: S3 through
// storage/s3, or storage/memstore), for clusters that have S3 and no etcd.
//
// # Objects
//
// Keys are relative to the object store's prefix. Every coordination
// write carries rev, a revision of this package's own (ETags cannot be
// ordered): the larger of the previous version's rev + 1, the writing
// store's largest rev seen + 1, and the store's clock in microseconds, so
// revisions grow per key and roughly follow time across writers. A
// listing reports the largest rev it saw, never less than the last one
// the same store reported.
//
//   - meta: storage.ClusterMeta as JSON, written once with Create.
//   - config: {"rev", "value" (base64)}; PutConfig compares rev and
//     writes with Replace If-Match the ETag of the version compared
//     (Create when the expected revision is 0).
//   - runners/<id>: {"rev", "runner" (storage.RunnerInfo), "lease" (a
//     random positive int63, new at every registration), "ttl_ms",
//     "renewal" (counts the lease's writes, so every body, and so every
//     ETag, differs), "expires" (object-store time), "vacant_at" (see
//     Locks)}; or a tombstone: {"rev", "lease", "tombstone": true, ...}
//     without "runner", marked "fence": true when a taker wrote it (see
//     Locks).
//   - shards/<group>/<index>: {"rev", "runner_id", "lease", "acquired_at",
//     "epoch", "ttl_ms" (the holder's lease TTL)} when held; {"rev",
//     "epoch"} when free. A released lock is not deleted, so that its
//     epoch (the fencing token) keeps growing.
//   - wake/<group>/<index>/<rev, 20 digits>-<nonce>: {"note"}, one object
//     per wake-up, deleted by any wake poller a minute after it was
//     written.
//
// # Leases
//
// A lease lives in its runner record. Register writes it with Create (If-
// None-Match), or with Replace If-Match over a tombstone or a lapsed lease
// (a live one gives storage.ErrRunnerExists). KeepAlive reads SentAt from
// the local clock first, then the store's clock st, and writes expires =
// st.Latest() + TTL with Replace If-Match the version it last wrote. Since
// st was read after SentAt and Latest bounds the store's clock from above,
//
//	expires ≥ (store time at SentAt) + TTL
//
// while the holder, which counts its deadline on its own clock from
// SentAt, detaches by SentAt + TTL − margin. A lease is lapsed only when
// the earliest the store's clock can read is past expires
// (ServerTime.Earliest() > expires): by then the store's clock has run
// more than TTL since SentAt, so the holder's deadline has passed on any
// clock that runs no slower than the store's (the margin covers drift).
// Nobody judges a lease lapsed while its holder may still act on it.
//
// A lease its holder knows to have lapsed never revives: its KeepAlive
// reports storage.ErrLeaseLost, and ends the session, when the last
// confirmed expiry has certainly passed by its own reading of the store's
// clock, or when its write loses and a re-read shows a tombstone, another
// lease or no record. Another reader, whose reading is tighter, may judge
// the lease lapsed a little sooner and then see it renewed (its locks
// leave the membership view and come back under the same epochs): the
// renewal landed before any tombstone, so nobody had taken a lock of it
// (a take tombstones the record first), and the holder had detached by
// its own deadline meanwhile. (A re-read that shows its own
// renewal counter means the write landed and its answer was lost: that is
// a success; one that shows an older write of its own lease, unexpired,
// is renewed on top.)
//
// Anyone may end a lapsed lease by tombstoning its record: Replace If-
// Match the version it judged, so a renewal that lands first makes the
// tombstone lose, and a tombstone that lands first makes the renewal lose.
// Replace, never DeleteIfMatch: VersityGW's conditional delete is not
// atomic against a concurrent conditional PUT, which would let a renewal
// succeed into a deleted record. Session.Close revokes the same way.
//
// # Locks
//
// AcquireShards, per shard (at most 4 in flight): Create when absent; when
// free, Replace If-Match with epoch + 1; when held by our lease, Acquired at
// its epoch; when held by another lease, Held while that lease is live;
// otherwise the lock is taken (Replace If-Match, epoch + 1) once the
// holder's lease has ended: its record is its tombstone, or its lapsed
// record, which the taker tombstones first. So a lock is never taken from
// a session that may still renew: the tombstone and the renewal are
// conditional writes on one object, and exactly one of them wins.
//
// A record can also vanish behind a live holder's back: an operator, a
// bucket lifecycle rule or a bug deletes runners/<id> or overwrites it
// with something undecodable. The holder learns of it only at its next
// renewal (ErrLeaseLost), and acts until its deadline meanwhile, up to a
// TTL; etcd has no such window, its locks being bound to the lease and not
// to the runner key. So a taker that finds the holder's record absent or
// undecodable does not take the lock. It fences the lease: it writes a
// tombstone of it marked "fence" (Create over the absent record, Replace
// If-Match over the undecodable version, so that a registration racing it
// wins or loses by the conditional write) with vacant_at = the store
// clock's Latest, read after it saw the record gone. No renewal of the
// lease has landed since the record went (a renewal is a Replace If-Match
// of the lease's own last version), so the holder's deadline is at most
// vacant_at + TTL in store time, TTL being the lock's ttl_ms (24h, the
// largest Register accepts, for a lock written before locks named it).
// The lock is Held, with the holder's id, until Earliest() is past that;
// then it is taken with epoch + 1. Meanwhile the holder's VerifyShards
// still says Owned: it is past its renewal failure and stops by its
// deadline, before any taker writes.
//
// A registration written over an absent key (Create) sets vacant_at in
// the same way, since the key's previous lease may have lost its record
// unannounced; registrations over a tombstone or a lapsed record, and
// tombstones, carry the previous record's vacant_at forward (for 24h). A
// lock bound to a lease that the holder's record does not name, or names
// in a fence, is taken once Earliest() is past that record's vacant_at +
// the lock's TTL (at once when it has none: a record of another lease
// without vacant_at was written over its predecessor's lapsed record or
// tombstone). The fast path stays: a lock of a lapsed or revoked lease is
// taken at once.
//
// Costs and edges of the window: a fence is kept until its wait is over
// and a retention beyond; a tombstone that a lock still names is not
// collected, so an orphaned lock is found with its lease's tombstone and
// taken at once; a lock found with no record at all (its tombstone deleted
// by hand, or collected while a lock bound to it was written concurrently)
// waits one TTL. VacantAt bounds the vanished lease only: a second
// registration of the id, from another store, created and deleted between
// a taker's read and its fence, could act up to one round trip past it.
// A restore of the holder's exact last record over the fence (an ETag
// identifies a body) would let it renew again: nothing defends that.
//
// Two departures from a plain design, argued: a lock created anew starts
// its epoch at its write's revision, not at 1, so that a lock object an
// operator (or a bug) deleted cannot reset the fencing token below an
// epoch a former holder used; and Session.Close tombstones the record
// before it frees the locks, so that every reader sees the runner and its
// locks go at once (a lock bound to a tombstoned lease is no lock), as
// etcd's revoke deletes them in one revision. The frees that follow are
// tidiness.
//
// # Watches
//
// Watches poll, one poll loop per store and kind (membership, config,
// wake-ups), shared by all its watchers: the interval is the minimum
// (default 100ms) right after a change and for five polls more (changes
// come in bursts: a release, then an acquire), then doubles towards the
// maximum (default 2s) while nothing changes; the membership poller also wakes
// when the first live lease may lapse. A poll LISTs and GETs only objects
// whose ETag changed. Changes made between two polls arrive as one batch
// of their net effect, in revision order, runner changes before lock
// changes at one revision; a lapsed or tombstoned lease appears as the
// delete of its runner and of every lock bound to it, in one batch.
// Renewals, which only move an expiry, are no event. A failed poll is
// announced by an Interrupted batch, and the next successful one is a
// Resync listing. WatchWakes lists the shard's wake objects before it
// returns, so every Wake completed afterwards is seen; one LIST of wake/
// per poll serves every watched shard; a failed poll or a consumer that
// falls behind gets a Resync event.
//
// # Request costs
//
// Per runner, with the default intervals, a TTL of 10s (renewals every
// ~3.3s) and N runners in the cluster, when idle: renewals 18 PUTs/min;
// the membership poll 60 LISTs/min (runners/ and shards/ every 2s) and
// 18·N GETs/min (every other runner's renewal changes its record's ETag);
// the config poll 30 GETs/min; the wake poll, while a shard is watched,
// 30 LISTs/min; and a clock refresh (HEAD) at most once a minute, when no
// other response refreshed it. Under load each poller runs at up to 10
// polls/s while changes keep coming (and for half a second after the
// last), and each changed object costs one GET per poller.
//
// The membership poller also collects: it tombstones a lease lapsed for
// more than a minute and deletes tombstones older than a minute, each with
// a write conditional on the version it read.
package s3coord
