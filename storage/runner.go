package storage

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultGroup is the shard group used when a cluster declares none.
const DefaultGroup = "default"

// ClusterMeta is the cluster's immutable shape, written once by the first
// runner; every later runner must agree with it.
type ClusterMeta struct {
	Shards    int       `json:"shards"`     // shards per group
	Groups    []string  `json:"groups"`     // shard groups, sorted
	Hash      string    `json:"hash"`       // assignment procedure, e.g. "xxhash64-rendezvous-sticky/v2"
	CreatedAt time.Time `json:"created_at"` // when the record was first written
}

// Compare returns a *MetaMismatchError for the first field of want that
// differs from m, or nil. CreatedAt is not compared.
func (m ClusterMeta) Compare(want ClusterMeta) error {
	if m.Shards != want.Shards {
		return &MetaMismatchError{Field: "shards", Stored: strconv.Itoa(m.Shards), Wanted: strconv.Itoa(want.Shards)}
	}
	if strings.Join(m.Groups, ",") != strings.Join(want.Groups, ",") {
		return &MetaMismatchError{Field: "groups", Stored: fmt.Sprintf("%q", m.Groups), Wanted: fmt.Sprintf("%q", want.Groups)}
	}
	if m.Hash != want.Hash {
		return &MetaMismatchError{Field: "hash", Stored: m.Hash, Wanted: want.Hash}
	}
	return nil
}

// RunnerInfo is a runner's registration record.
type RunnerInfo struct {
	ID   string `json:"id"`   // unique, stable runner id
	Addr string `json:"addr"` // admin address (HTTP: metrics, health, drain), may be empty
	// CallAddr is where the runner serves entity calls (gRPC, and HTTP +
	// JSON): host:port, or empty when it serves none. Records of runners
	// older than entity messaging have none.
	CallAddr string   `json:"call_addr,omitempty"`
	Weight   float64  `json:"weight"` // assignment weight; 0 drains the runner
	Groups   []string `json:"groups"` // shard groups it serves
	// Types are the entity and task types the runner hosts, sorted, so
	// that callers route a type to the group whose runners host it and
	// operators see a type no runner hosts. Records of runners older than
	// placement by type have none.
	Types     []string  `json:"types,omitempty"`
	Version   string    `json:"version"`    // software version
	StartedAt time.Time `json:"started_at"` // process start

	// LeaseID is the lease the record is bound to; filled in on read.
	LeaseID int64 `json:"-"`
}

// ShardID names one shard: its group and its index in [0, shards).
type ShardID struct {
	Group string
	Index int
}

// String returns "group/index".
func (s ShardID) String() string { return s.Group + "/" + strconv.Itoa(s.Index) }

// Less orders shards by group, then index.
func (s ShardID) Less(o ShardID) bool {
	if s.Group != o.Group {
		return s.Group < o.Group
	}
	return s.Index < o.Index
}

// ShardLock is a held shard lock as stored.
type ShardLock struct {
	Shard      ShardID
	RunnerID   string    // holder's runner id
	AcquiredAt time.Time // holder's clock at acquisition
	LeaseID    int64     // holder's lease: the lock's identity
	// Epoch is strictly increasing across successive holders of the
	// shard, and used as a fencing token: on etcd the lock key's creation
	// revision, on S3 (storage/s3coord) a number kept in the lock object
	// that every new holder raises.
	Epoch int64
}

// AcquireStatus is the outcome of acquiring one shard.
type AcquireStatus int

const (
	// Acquired: the lock is ours (newly created, or already held by our lease).
	Acquired AcquireStatus = iota + 1
	// Held: another lease holds the lock.
	Held
	// Failed: the attempt itself failed; see Err.
	Failed
)

func (s AcquireStatus) String() string {
	switch s {
	case Acquired:
		return "acquired"
	case Held:
		return "held"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// AcquireResult is the per-shard outcome of Session.AcquireShards.
type AcquireResult struct {
	Shard  ShardID
	Status AcquireStatus
	Epoch  int64  // when Acquired: the lock's epoch
	Holder string // when Held: the holder's runner id
	Err    error  // when Failed
}

// VerifyResult is the per-shard outcome of Session.VerifyShards.
type VerifyResult struct {
	Shard  ShardID
	Owned  bool   // the lock exists and is bound to this session's lease
	Epoch  int64  // when Owned: the lock's epoch
	Holder string // when held by someone else: the holder's runner id
}

// EventKind says what happened to a watched key.
type EventKind int

const (
	// EventPut: the key was created or changed.
	EventPut EventKind = iota + 1
	// EventDelete: the key was deleted (or expired with its lease).
	EventDelete
)

func (k EventKind) String() string {
	switch k {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	}
	return "unknown"
}

// RunnerEvent is a change to runners/.
type RunnerEvent struct {
	Kind     EventKind
	ID       string
	Runner   RunnerInfo // zero on delete
	Revision int64      // the backend's revision of the change (etcd's, or storage/s3coord's own)
	// Resync marks events synthesised by re-listing after the watch was
	// interrupted (compaction, disconnect): the consumer's view is brought
	// up to date by them, including deletes it missed.
	Resync bool
	// Err is set when the stored record could not be decoded; Runner is zero
	// and the consumer should treat the runner as absent.
	Err error
}

// LockEvent is a change to shards/.
type LockEvent struct {
	Kind     EventKind
	Shard    ShardID
	Lock     ShardLock // zero on delete
	Revision int64
	Resync   bool  // see RunnerEvent.Resync
	Err      error // see RunnerEvent.Err
}

// MembershipEvent is one change of the membership stream: exactly one of
// Runner and Lock is set.
type MembershipEvent struct {
	Runner *RunnerEvent // a change to runners/
	Lock   *LockEvent   // a change to shards/
}

// Revision returns the backend's revision of the change.
func (e MembershipEvent) Revision() int64 {
	if e.Runner != nil {
		return e.Runner.Revision
	}
	if e.Lock != nil {
		return e.Lock.Revision
	}
	return 0
}

// MembershipBatch is one step of the membership stream (runners/ and
// shards/ together). A consumer that applies whole batches in order holds,
// after each, the state of both prefixes at Revision: it never sees a lock
// change before the runner change that explains it (a join, a drain's
// weight 0), nor half of one revision (a lease expiry deletes a runner and
// its locks at once).
type MembershipBatch struct {
	// Revision is the backend's revision the state is at once the batch is
	// applied.
	Revision int64
	// Listing marks a full listing of both prefixes read at Revision: a
	// put for every live runner and every held lock (and, in a stream,
	// deletes for the keys gone since the previous batch). A consumer
	// replaces its view with it instead of applying it as changes. The
	// first batch of a stream and every one after an interruption are
	// listings.
	Listing bool
	// Resync marks a listing that follows an interruption (compaction,
	// disconnect): changes between the previous batch and Revision were
	// not seen one by one.
	Resync bool
	// Interrupted marks an empty batch that says the stream just broke
	// (compaction, lost leader, closed stream): changes after Revision are
	// not seen until the Resync listing that follows. A consumer that
	// relies on the stream to learn of a change (a lock of its own
	// deleted) checks for itself meanwhile. Revision is the previous
	// batch's.
	Interrupted bool
	// Events are the changes in revision order (a listing: runners, then
	// locks, then deletes).
	Events []MembershipEvent
}

// ConfigValue is the dynamic config document as stored.
type ConfigValue struct {
	Value    []byte // raw document; nil when absent
	Revision int64  // modification revision; 0 when absent
}

// ConfigEvent is a change to the config key.
type ConfigEvent struct {
	Kind     EventKind
	Value    ConfigValue
	Revision int64
	Resync   bool
}

// WakeEvent is a wake-up of a shard's owner: someone has work for the shard
// (a submitted task, a cancel request).
type WakeEvent struct {
	Shard    ShardID
	Note     string // free-form; the task's ready-pointer key by convention
	Revision int64
	// Resync reports that the stream was interrupted and wake-ups may have
	// been missed: re-read the shard's work.
	Resync bool
}

// ClusterMetaStore owns the cluster meta record: the cluster's shape,
// written once and checked by every runner that joins. The sharding manager
// and the runner check it at start; the CLI reads it to size task clients.
type ClusterMetaStore interface {
	// EnsureMeta writes the cluster meta if absent and returns the stored
	// record; a stored record that disagrees with m yields a
	// *MetaMismatchError.
	EnsureMeta(ctx context.Context, m ClusterMeta) (ClusterMeta, error)
	// Meta returns the stored cluster meta, or ErrNotFound.
	Meta(ctx context.Context) (ClusterMeta, error)
}

// Registrar owns runner registration: each registration is a Session, and
// the lease and shard locks belong to the session, so that they end
// together. The sharding manager is its user.
type Registrar interface {
	// Register grants a new lease of ttl and writes the runner record under
	// it. Nothing renews the lease until the caller does (see Session). A
	// live record with the same id yields ErrRunnerExists.
	Register(ctx context.Context, r RunnerInfo, ttl time.Duration) (Session, error)
}

// MembershipReader owns the read side of membership: the live runners and
// their shard locks, listed or watched as one stream. The sharding manager
// assigns shards from it.
type MembershipReader interface {
	// Runners lists live runners with the revision of the read. Undecodable
	// records are left out and reported as an error wrapping ErrCorrupt
	// alongside the decodable ones.
	Runners(ctx context.Context) ([]RunnerInfo, int64, error)
	// Membership lists live runners and held locks together, read at one
	// revision, as a Listing batch. Undecodable records are listed as
	// events carrying Err, and also reported as an error wrapping
	// ErrCorrupt.
	Membership(ctx context.Context) (MembershipBatch, error)
	// WatchMembership streams runners/ and shards/ as one stream of
	// batches in revision order (see MembershipBatch), starting with a
	// listing. The channel closes when ctx ends.
	WatchMembership(ctx context.Context) <-chan MembershipBatch
}

// ShardLockReader owns the shard locks read on their own, without the
// runners that explain them: enough for tools that report or wait on locks
// (status, drain, the benchmarks' lock tracker), not for assignment, which
// needs MembershipReader's ordering.
type ShardLockReader interface {
	// ShardLocks lists held shard locks with the revision of the read;
	// undecodable records are handled as in MembershipReader.Runners.
	ShardLocks(ctx context.Context) ([]ShardLock, int64, error)
	// WatchShardLocks streams changes to shards/, starting with a put for
	// every held lock. The channel closes when ctx ends.
	WatchShardLocks(ctx context.Context) <-chan LockEvent
}

// LeaseTime is what the backend says of a lease: the TTL it was granted
// and how long it has left unless renewed.
type LeaseTime struct {
	// Granted is the TTL the lease was granted (and every renewal
	// restores).
	Granted time.Duration
	// Remaining bounds the time left from the answer: the lease expires no
	// later than Remaining after it unless renewed meanwhile. It is an
	// upper bound because backends count in coarse units (etcd: whole
	// seconds, rounded down, so Remaining is that count plus 1s).
	Remaining time.Duration
}

// LeaseReader owns the read of a lease's time left. Tools that report on
// runners (status) use it to tell how long a runner that does not answer
// keeps its shard locks: they are bound to its lease.
type LeaseReader interface {
	// LeaseTimeToLive returns the lease's granted TTL and time left; a
	// lease that no longer exists (expired, revoked, never granted)
	// gives an error wrapping ErrNotFound.
	LeaseTimeToLive(ctx context.Context, leaseID int64) (LeaseTime, error)
}

// DynamicConfig owns the dynamic config document: the CLI reads and
// compare-and-swaps it, runners watch it.
type DynamicConfig interface {
	// Config returns the dynamic config document (zero value when absent).
	Config(ctx context.Context) (ConfigValue, error)
	// PutConfig writes the dynamic config document if its current revision
	// is prevRevision (0: it must not exist), returning the new revision or
	// ErrPrecondition.
	PutConfig(ctx context.Context, value []byte, prevRevision int64) (int64, error)
	// WatchConfig streams changes to the config key, starting with its
	// current value when present. The channel closes when ctx ends.
	WatchConfig(ctx context.Context) <-chan ConfigEvent
}

// Waker owns the sending side of wake-ups: task submitters tell a shard's
// owner it has work. It has the method set of task.Waker, so a RunnerStore
// serves as a task client's waker.
type Waker interface {
	// Wake tells whoever watches shard that it has work. It is cheap and
	// best effort: owners also reconcile periodically.
	Wake(ctx context.Context, shard ShardID, note string) error
}

// WakeWatcher owns the receiving side of wake-ups: a shard's owner (the
// entity host) watches them so that it need not wait for its next
// reconciliation.
type WakeWatcher interface {
	// WatchWakes streams the wake-ups of shard. It returns once the watch is
	// established, so every Wake that completes afterwards is delivered (or
	// covered by a Resync event). The channel closes when ctx ends.
	WatchWakes(ctx context.Context, shard ShardID) (<-chan WakeEvent, error)
}

// RunnerStore is the runner-storage port: every narrow port above on one
// store, which is what an adapter (storage/etcd, storage/s3coord) implements and the
// conformance suite checks. Consumers take the narrow ports they use.
// Implementations are safe for concurrent use and bound every call by their
// request timeout.
type RunnerStore interface {
	ClusterMetaStore
	Registrar
	MembershipReader
	ShardLockReader
	LeaseReader
	DynamicConfig
	Waker
	WakeWatcher

	// Close releases the store's resources. It does not revoke sessions'
	// leases: close sessions first for a clean exit.
	Close() error
}

// Session is one registration of a runner: its lease and the shard locks
// bound to it. It runs no keep-alive of its own: whoever holds it renews
// the lease with KeepAlive on its own cadence (the sharding manager with
// its Config, other callers with KeepAliveLoop), so that every result
// reaches them, in order.
type Session interface {
	// RunnerID is the registered runner's id.
	RunnerID() string
	// LeaseID is the lease every key of the session is bound to.
	LeaseID() int64
	// TTL is the lease TTL granted at registration.
	TTL() time.Duration

	// Granted returns the registration's grant, which confirms the lease as
	// a keep-alive would: SentAt is when the grant request left, TTL what
	// it granted. It is the lease's first confirmation.
	Granted() KeepAliveResult
	// KeepAlive renews the lease once, bounded by ctx, and returns what the
	// answer established. An error wrapping ErrLeaseLost means the lease no
	// longer exists (answered TTL ≤ 0, or not found): the session ends. Once
	// the session has ended it returns ErrSessionClosed (or ErrLeaseLost)
	// and sends nothing. Any other error is a failed attempt, typically
	// ErrUnavailable (no answer by ctx's deadline, no leader, connection
	// lost). The result carries SentAt even on error.
	KeepAlive(ctx context.Context) (KeepAliveResult, error)
	// Done is closed when the session ends: Orphan, Close, its store's
	// Close, or a KeepAlive that found the lease lost.
	Done() <-chan struct{}

	// UpdateRunner rewrites the runner record under the session's lease (for
	// instance to change the weight). The id must not change.
	UpdateRunner(ctx context.Context, r RunnerInfo) error
	// AcquireShards tries to lock every shard for this lease, with bounded
	// concurrency. The error is non-nil only when no attempt could be made;
	// per-shard failures are in the results.
	AcquireShards(ctx context.Context, shards []ShardID) ([]AcquireResult, error)
	// VerifyShards checks, in one read, which shards are still locked by this
	// lease.
	VerifyShards(ctx context.Context, shards []ShardID) ([]VerifyResult, error)
	// ReleaseShard deletes the shard's lock if this lease holds it; a lock
	// held by another lease yields ErrNotOwner, a missing one nil.
	ReleaseShard(ctx context.Context, shard ShardID) error

	// Orphan ends the session without revoking the lease: once it returns
	// no keep-alive is under way or will be sent, so the lease and every key
	// bound to it expire after the TTL, as after a crash.
	Orphan()
	// Close ends the session as Orphan does and revokes the lease, deleting
	// the runner record and every shard lock at once.
	Close(ctx context.Context) error
}
