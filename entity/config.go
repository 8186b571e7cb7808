package entity

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("entity: invalid config")

// Config tunes the host. Durations are wall-clock time.
type Config struct {
	// ReconcileInterval is how often an owned shard's ready pointers are
	// listed even when no wake-up came: the safety net for lost wake-ups and
	// the only S3 traffic of an idle shard. Default 60s.
	ReconcileInterval time.Duration
	// TaskLease is how long a claim lasts without renewal; a running task's
	// claim is renewed every TaskLease/3. Default 30s.
	TaskLease time.Duration
	// MaxConcurrentPerShard bounds the handlers running at once on one shard.
	// Default 64.
	MaxConcurrentPerShard int
	// MaxConcurrentPerRunner bounds the handlers running at once on the
	// runner, across shards. Default 256.
	MaxConcurrentPerRunner int
	// MaxIdle is how long an entity instance stays resident without work
	// before it is passivated. Default 60s.
	MaxIdle time.Duration
	// MaxResident caps the resident entity instances of the runner; beyond
	// it the least recently used idle ones are passivated. Default 10000.
	MaxResident int
	// TakeoverImmediately reclaims a task left running by a previous owner
	// as soon as the shard is acquired. That is safe only when every runner
	// enforces detachment (the previous owner stopped before its lock could
	// go); otherwise the claim's lease must expire first. Default true.
	TakeoverImmediately bool
	// HookTimeout bounds an entity's OnStart and OnStop. Default 10s.
	HookTimeout time.Duration
	// OrphanPointerAge is how old a ready pointer whose task object does not
	// exist must be before it is deleted: the submitter writes the pointer
	// first, so a young one may be a submission in progress. Default 5m.
	OrphanPointerAge time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		ReconcileInterval:      60 * time.Second,
		TaskLease:              30 * time.Second,
		MaxConcurrentPerShard:  64,
		MaxConcurrentPerRunner: 256,
		MaxIdle:                60 * time.Second,
		MaxResident:            10000,
		TakeoverImmediately:    true,
		HookTimeout:            10 * time.Second,
		OrphanPointerAge:       5 * time.Minute,
	}
}

// Validate checks every bound, naming the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, v any, rule string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidConfig, field, v, rule))
	}
	if c.ReconcileInterval < time.Second {
		bad("ReconcileInterval", c.ReconcileInterval, "must be ≥ 1s")
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
	return errors.Join(errs...)
}
