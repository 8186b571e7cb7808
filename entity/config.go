package entity

import (
	"errors"
	"fmt"
	"reflect"
	"time"
)

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("entity: invalid config")

// Config tunes the host. Durations are wall-clock time.
type Config struct {
	// ReconcileInterval is how soon after activity an owned shard's ready
	// pointers are listed again even when no wake-up came: the safety net
	// for lost wake-ups. The next listing is at most ReconcileInterval
	// (plus up to 10% jitter) after the shard's acquisition, a wake-up, a
	// task start, or a listing that found pointers no wake-up had
	// announced; each listing that finds nothing new, with no activity
	// since the previous one, doubles the wait, up to
	// ReconcileMaxInterval. Default 60s.
	ReconcileInterval time.Duration `key:"entity.reconcile_interval"`
	// ReconcileMaxInterval caps the wait between two listings of an idle
	// shard's ready pointers (see ReconcileInterval), and with it the
	// delay of a task whose wake-up was lost: it starts within the shard's
	// current wait (ReconcileInterval right after activity, doubling with
	// each empty listing) plus up to 10%, so at most 1.1 ×
	// ReconcileMaxInterval after its submission, and, submitted d after
	// the shard's last activity, within 1.1 × min(d + ReconcileInterval,
	// ReconcileMaxInterval) (each wait is at most the time passed since
	// the activity plus ReconcileInterval); plus the listing's and the
	// claim's own time. At least ReconcileInterval. Default 1h: an idle
	// shard costs one reconciliation LIST an hour.
	ReconcileMaxInterval time.Duration `key:"entity.reconcile_max_interval"`
	// TaskLease is how long a claim lasts without renewal; a running task's
	// claim is renewed every TaskLease/3. Default 30s.
	TaskLease time.Duration `key:"entity.task_lease"`
	// MaxConcurrentPerShard bounds the handlers running at once on one shard.
	// Default 64.
	MaxConcurrentPerShard int `key:"entity.max_concurrent_per_shard"`
	// MaxConcurrentPerRunner bounds the handlers running at once on the
	// runner, across shards. Default 256.
	MaxConcurrentPerRunner int `key:"entity.max_concurrent_per_runner"`
	// MaxIdle is how long an entity instance stays resident without work
	// before it is passivated. Default 60s.
	MaxIdle time.Duration `key:"entity.max_idle"`
	// MaxResident caps the resident entity instances of the runner; beyond
	// it the least recently used idle ones are passivated. Default 10000.
	MaxResident int `key:"entity.max_resident"`
	// InterruptTimeout is how long, after a shard's work is interrupted
	// (detachment, lock loss, stop), its handlers have to return before
	// those still running are counted (tenure_tasks_interrupt_overruns_total)
	// and named in the log. A planned release waits for them the same way,
	// bounded by the sharding interrupt timeout. Set it to the sharding
	// InterruptTimeout. Default 5s.
	InterruptTimeout time.Duration `key:"sharding.interrupt_timeout"`
	// HookTimeout bounds an entity's OnStart and OnStop. Default 10s.
	HookTimeout time.Duration
	// OrphanPointerAge is how old a ready pointer whose task object does not
	// exist must be before it is deleted: the submitter writes the pointer
	// first, so a young one may be a submission in progress. A pointer's
	// age counts from its write by the S3 clock (its LastModified, less
	// its one-second resolution) when a listing found it, or from this
	// ownership's first look if that is longer ago. Default 5m.
	OrphanPointerAge time.Duration
	// OrphanWait is how long a ready pointer found without its task object
	// is looked at again, with backoff from 100ms, while it keeps its place
	// at the head of its entity's mailbox: the submitter writes the object
	// right after the pointer, so the object normally shows up within
	// milliseconds and the task must not wait for the next reconciliation.
	// Past OrphanWait the submission is taken to have failed: the entity's
	// later tasks go ahead, and the pointer is deleted once it is
	// OrphanPointerAge old (or run, if its object and wake-up still come).
	// The wait counts the pointer's age as OrphanPointerAge does, so a
	// failed submission is waited out once, not again by every ownership
	// of its shard (a runner that re-attaches, a shard that moves).
	// Default 10s.
	OrphanWait time.Duration
	// TaskRetention is how long a finished task (completed, failed or
	// cancelled) is kept, counted in S3 time from its last write, before
	// its shard's owner deletes it; 0 keeps finished tasks forever. Pending
	// and running tasks are never deleted. Default 168h (7 days).
	//
	// Cost, per owned shard and sweep pass: one LIST per 1000 task objects
	// listed. UUIDv7 ids sort by creation, so the listing skips the tasks
	// created after the cutoff: an idle shard costs one LIST per pass (two
	// when it holds over 1000 tasks), plus one per 1000 tasks it cannot
	// skip (unfinished tasks created before the cutoff, and tasks with
	// caller-given ids, which sort anywhere). Per finished task, once: one
	// GET and one DELETE when it completed; one GET, one PUT (the
	// compare-and-swap that takes it out of a replay's reach) and one
	// DELETE when it failed or was cancelled. An unfinished task last
	// written more than the retention ago costs one GET per ownership of
	// its shard. See the package doc and task.Store.Purge.
	TaskRetention time.Duration `key:"entity.task_retention"`
	// TaskSweepInterval is how often each owned shard is swept for finished
	// tasks older than TaskRetention (plus up to 10% jitter, never less,
	// so that an idle shard is swept at most once an hour at the
	// defaults); the first pass comes at a
	// random point of the second ReconcileInterval (or TaskSweepInterval,
	// if shorter) after the shard is acquired, and a pass cut short by its
	// bounds (1000 objects read, 10000 keys listed) is followed by the next
	// one a second later. 0 derives it: TaskRetention/24, at least 1s and
	// at most 1h, so that a finished task outlives the retention by at most
	// a twenty-fourth of it (an hour at the default). Default 0.
	TaskSweepInterval time.Duration `key:"entity.task_sweep_interval"`
	// SendTimeout bounds the handler of a send (a one-way message): it runs
	// after the sender has moved on, under a context of its own that ends
	// after SendTimeout (or earlier, with the shard or the runner's
	// attachment). Default 1m.
	SendTimeout time.Duration `key:"entity.send_timeout"`
	// MaxStateSize is the largest durable entity state (see State), in
	// bytes of its JSON encoding; a larger one is refused with
	// ErrStateTooLarge before any request. At most MaxStateSizeLimit, so
	// that a state object, with its envelope, stays well within what the
	// S3 adapter reads. Default 1 MiB.
	MaxStateSize int `key:"entity.max_state_size"`
}

// MaxStateSizeLimit bounds Config.MaxStateSize: 8 MiB.
const MaxStateSizeLimit = 8 << 20

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		ReconcileInterval:      60 * time.Second,
		ReconcileMaxInterval:   time.Hour,
		TaskLease:              30 * time.Second,
		MaxConcurrentPerShard:  64,
		MaxConcurrentPerRunner: 256,
		MaxIdle:                60 * time.Second,
		MaxResident:            10000,
		InterruptTimeout:       5 * time.Second,
		HookTimeout:            10 * time.Second,
		OrphanPointerAge:       5 * time.Minute,
		OrphanWait:             10 * time.Second,
		TaskRetention:          7 * 24 * time.Hour,
		SendTimeout:            time.Minute,
		MaxStateSize:           1 << 20,
	}
}

// Bounds of the derived TaskSweepInterval.
const (
	minSweepInterval = time.Second
	maxSweepInterval = time.Hour
)

// SweepInterval is the interval the retention sweep runs at, before its
// jitter: TaskSweepInterval, or the one derived from TaskRetention (it
// does not say whether TaskRetention disables the sweep).
func (c Config) SweepInterval() time.Duration {
	if c.TaskSweepInterval > 0 {
		return c.TaskSweepInterval
	}
	return min(max(c.TaskRetention/24, minSweepInterval), maxSweepInterval)
}

// ConfigError names the Config field that failed validation.
type ConfigError struct {
	Field string // Go field name, e.g. "TaskLease"
	// Key is the field's configuration key, e.g. "entity.task_lease": the
	// name a runner's config file and the CLI use (the field's key tag);
	// "" for a field a runner does not expose.
	Key   string
	Value string // the rejected value, formatted
	Rule  string // what the value must satisfy
}

// Error names the key and the Go field, the value and the rule: a Go
// caller builds this Config by its fields, a runner's user sets its keys
// (a runner reports Setting, the keys alone).
func (e *ConfigError) Error() string {
	name := e.Field
	if e.Key != "" {
		name = e.Key + " (" + e.Field + ")"
	}
	return fmt.Sprintf("entity: invalid config: %s = %s: %s", name, e.Value, e.Rule)
}

// Setting is the error without its package's prefix: "key = value: rule".
func (e *ConfigError) Setting() string {
	name := e.Key
	if name == "" {
		name = e.Field
	}
	return fmt.Sprintf("%s = %s: %s", name, e.Value, e.Rule)
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) hold.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// keyOf is the configuration key of Config's field (its key tag), or ""
// for a field that has none.
func keyOf(field string) string {
	if f, ok := reflect.TypeFor[Config]().FieldByName(field); ok {
		return f.Tag.Get("key")
	}
	return ""
}

// Validate checks every bound; the error joins one *ConfigError per bad
// field, naming its key.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, v any, rule string) {
		errs = append(errs, &ConfigError{Field: field, Key: keyOf(field), Value: fmt.Sprint(v), Rule: rule})
	}
	if c.ReconcileInterval < time.Second {
		bad("ReconcileInterval", c.ReconcileInterval, "must be ≥ 1s")
	}
	if c.ReconcileMaxInterval < c.ReconcileInterval {
		bad("ReconcileMaxInterval", c.ReconcileMaxInterval, fmt.Sprintf("must be ≥ entity.reconcile_interval (%s)", c.ReconcileInterval))
	}
	if c.TaskLease < 3*time.Second {
		bad("TaskLease", c.TaskLease, "must be ≥ 3s (renewed every third)")
	}
	if c.MaxConcurrentPerShard < 1 {
		bad("MaxConcurrentPerShard", c.MaxConcurrentPerShard, "must be ≥ 1")
	}
	if c.MaxConcurrentPerRunner < 1 {
		bad("MaxConcurrentPerRunner", c.MaxConcurrentPerRunner, "must be ≥ 1")
	}
	if c.MaxIdle <= 0 {
		bad("MaxIdle", c.MaxIdle, "must be > 0")
	}
	if c.MaxResident < 1 {
		bad("MaxResident", c.MaxResident, "must be ≥ 1")
	}
	if c.HookTimeout <= 0 {
		bad("HookTimeout", c.HookTimeout, "must be > 0")
	}
	if c.OrphanPointerAge < time.Second {
		bad("OrphanPointerAge", c.OrphanPointerAge, "must be ≥ 1s")
	}
	if c.OrphanWait <= 0 || c.OrphanWait > c.OrphanPointerAge {
		bad("OrphanWait", c.OrphanWait, fmt.Sprintf("must be in (0, OrphanPointerAge %s]", c.OrphanPointerAge))
	}
	if c.InterruptTimeout <= 0 {
		bad("InterruptTimeout", c.InterruptTimeout, "must be > 0")
	}
	if c.TaskRetention != 0 && c.TaskRetention < time.Second {
		bad("TaskRetention", c.TaskRetention, "must be 0 (keep finished tasks) or ≥ 1s")
	}
	if c.TaskSweepInterval != 0 && c.TaskSweepInterval < minSweepInterval {
		bad("TaskSweepInterval", c.TaskSweepInterval, "must be 0 (derived from entity.task_retention) or ≥ 1s")
	}
	if c.SendTimeout <= 0 {
		bad("SendTimeout", c.SendTimeout, "must be > 0")
	}
	if c.MaxStateSize < 1 || c.MaxStateSize > MaxStateSizeLimit {
		bad("MaxStateSize", c.MaxStateSize, fmt.Sprintf("must be in [1, %d]", MaxStateSizeLimit))
	}
	return errors.Join(errs...)
}
