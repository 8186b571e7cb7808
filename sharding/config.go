package sharding

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/detachment"
)

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("sharding: invalid config")

// Config holds every setting of DESIGN §4–§5: the lease, detachment and the
// shard loops. Durations are wall-clock time.
type Config struct {
	// LeaseTTL is the runner lease's TTL in etcd (whole seconds; etcd rounds
	// up). It bounds crash failover: a dead runner's shards free up one TTL
	// after its last keep-alive. Default 10s.
	LeaseTTL time.Duration
	// KeepAliveInterval is the time between confirmed keep-alives, counted
	// from one send to the next; after a failure the next try comes sooner,
	// from 200ms (storage.DefaultKeepAliveRetryBackoff) with backoff.
	// Interval plus KeepAliveTimeout must end before the cutoff (LeaseTTL -
	// DetachMargin), so a healthy runner renews well before it would detach.
	// The Manager runs the keep-alive loop on this cadence; the runner store
	// has none of its own. Default LeaseTTL/3.
	KeepAliveInterval time.Duration
	// KeepAliveTimeout bounds one keep-alive call. Default LeaseTTL/6 (not
	// storage.DefaultKeepAliveCadence's floor of 200ms, which only a 1s
	// lease reaches).
	KeepAliveTimeout time.Duration

	// Detachment holds the detachment machine's settings: mode, margin,
	// recover window, failure threshold and storage-error grace.
	Detachment detachment.Config

	// RebalanceDebounce coalesces bursts of membership changes: the
	// rebalance runs this long after the first change it answers. Default
	// 250ms.
	RebalanceDebounce time.Duration
	// RebalanceInterval is the periodic safety pass: a fresh read of the
	// runners and locks (which verifies the owned locks too) and a full
	// rebalance, in case a watch event was missed. Default 10s.
	RebalanceInterval time.Duration
	// LockRefreshInterval is how often owned locks are verified with one
	// read of shards/ while the membership stream is out of sync (between
	// a break and the listing that resumes it). While it is in sync the
	// stream reports every change of the locks, and no read is made.
	// Must be ≤ LeaseTTL/3. Default LeaseTTL/3.
	LockRefreshInterval time.Duration
	// AcquireRetryInterval is the pause between tries at shards assigned to
	// this runner but still held elsewhere. Default 200ms.
	AcquireRetryInterval time.Duration
	// AcquireRetryWindow is how long such tries go on before giving up
	// until the next rebalance (the membership stream still acquires a
	// shard the moment its lock is deleted). 0 disables retries. Default 2s.
	AcquireRetryWindow time.Duration
	// InterruptTimeout bounds the wait for a shard's handlers to stop and
	// hand over in-flight work on a planned release, and on stop the wait
	// for every handler to return before the lease is revoked (a Handler
	// that is a Quiescer). The entity host counts the handlers still
	// running after it as overruns. Default 5s.
	InterruptTimeout time.Duration
	// ProbeInterval is how often a detached runner makes a cheap storage
	// read, so that healthy signals keep arriving and it can re-attach.
	// Default 500ms.
	ProbeInterval time.Duration
}

// DefaultConfig returns the defaults of DESIGN §4–§5 for a 10s lease.
func DefaultConfig() Config { return DefaultConfigFor(10 * time.Second) }

// DefaultConfigFor returns the defaults scaled to a lease TTL.
func DefaultConfigFor(leaseTTL time.Duration) Config {
	return Config{
		LeaseTTL:             leaseTTL,
		KeepAliveInterval:    leaseTTL / 3,
		KeepAliveTimeout:     leaseTTL / 6,
		Detachment:           detachment.DefaultConfig(leaseTTL),
		RebalanceDebounce:    250 * time.Millisecond,
		RebalanceInterval:    10 * time.Second,
		LockRefreshInterval:  leaseTTL / 3,
		AcquireRetryInterval: 200 * time.Millisecond,
		AcquireRetryWindow:   2 * time.Second,
		InterruptTimeout:     5 * time.Second,
		ProbeInterval:        500 * time.Millisecond,
	}
}

// ConfigError names the field that failed validation.
type ConfigError struct {
	Field string
	Value string
	Rule  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("sharding: invalid config: %s = %s: %s", e.Field, e.Value, e.Rule)
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) hold.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Validate checks every bound; the error joins one *ConfigError (or
// detachment.ConfigError) per bad field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, v time.Duration, rule string) {
		errs = append(errs, &ConfigError{Field: field, Value: v.String(), Rule: rule})
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0 {
		bad("LeaseTTL", c.LeaseTTL, "must be a whole number of seconds ≥ 1s (etcd's granularity)")
	}
	if err := c.Detachment.Validate(c.LeaseTTL); err != nil {
		errs = append(errs, err)
	}
	if c.KeepAliveTimeout <= 0 || c.KeepAliveTimeout > c.LeaseTTL/2 {
		bad("KeepAliveTimeout", c.KeepAliveTimeout, fmt.Sprintf("must be in (0, LeaseTTL/2 = %s]", c.LeaseTTL/2))
	}
	if cutoff := c.LeaseTTL - c.Detachment.DetachMargin; c.KeepAliveInterval <= 0 || c.KeepAliveInterval+c.KeepAliveTimeout >= cutoff {
		bad("KeepAliveInterval", c.KeepAliveInterval, fmt.Sprintf("must be > 0 and, plus KeepAliveTimeout %s, below LeaseTTL - DetachMargin = %s: a healthy runner must renew before its cutoff", c.KeepAliveTimeout, cutoff))
	}
	if c.RebalanceDebounce < 0 || c.RebalanceDebounce > time.Minute {
		bad("RebalanceDebounce", c.RebalanceDebounce, "must be in [0, 1m]")
	}
	if c.RebalanceInterval < time.Second {
		bad("RebalanceInterval", c.RebalanceInterval, "must be ≥ 1s")
	}
	if c.LockRefreshInterval <= 0 || c.LockRefreshInterval > c.LeaseTTL/3 {
		bad("LockRefreshInterval", c.LockRefreshInterval, fmt.Sprintf("must be in (0, LeaseTTL/3 = %s]", c.LeaseTTL/3))
	}
	if c.AcquireRetryInterval < 10*time.Millisecond {
		bad("AcquireRetryInterval", c.AcquireRetryInterval, "must be ≥ 10ms")
	}
	if c.AcquireRetryWindow < 0 {
		bad("AcquireRetryWindow", c.AcquireRetryWindow, "must be ≥ 0 (0 disables retries)")
	}
	if c.InterruptTimeout <= 0 {
		bad("InterruptTimeout", c.InterruptTimeout, "must be > 0")
	}
	if c.ProbeInterval < 10*time.Millisecond || c.ProbeInterval > c.LeaseTTL {
		bad("ProbeInterval", c.ProbeInterval, fmt.Sprintf("must be in [10ms, LeaseTTL %s]", c.LeaseTTL))
	}
	return errors.Join(errs...)
}
