package sharding

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/tenurehq/tenure/detachment"
)

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("sharding: invalid config")

// Config holds the settings of a Manager: the lease, detachment and the
// shard loops. Durations are wall-clock time. The intervals that follow the
// lease TTL (keep-alive interval and timeout, detach margin, lock refresh)
// may be left zero: WithDefaults, which New applies, derives them.
type Config struct {
	// LeaseTTL is the runner lease's TTL in etcd (whole seconds; etcd rounds
	// up). It bounds crash failover: a dead runner's shards free up one TTL
	// after its last keep-alive. Default 10s.
	LeaseTTL time.Duration `key:"lease.ttl"`
	// KeepAliveInterval is the time between confirmed keep-alives, counted
	// from one send to the next; after a failure the next try comes sooner,
	// from 200ms (storage.DefaultKeepAliveRetryBackoff) with backoff.
	// Interval plus KeepAliveTimeout must end before the cutoff (LeaseTTL -
	// DetachMargin), so a healthy runner renews well before it would detach.
	// The Manager runs the keep-alive loop on this cadence; the runner store
	// has none of its own. Zero follows LeaseTTL: LeaseTTL/3
	// (detachment.DeriveFromLease).
	KeepAliveInterval time.Duration `key:"lease.keepalive_interval"`
	// KeepAliveTimeout bounds one keep-alive call. Zero follows LeaseTTL:
	// LeaseTTL/6.
	KeepAliveTimeout time.Duration `key:"lease.keepalive_timeout"`

	// Detachment holds the detachment machine's settings: mode, margin,
	// recover window, failure threshold and storage-error grace. A zero
	// DetachMargin follows LeaseTTL: LeaseTTL/3.
	Detachment detachment.Config

	// RebalanceDebounce coalesces bursts of membership changes: the
	// rebalance runs this long after the first change it answers. Default
	// 250ms.
	RebalanceDebounce time.Duration `key:"sharding.rebalance_debounce"`
	// RebalanceInterval is the periodic safety pass: a fresh read of the
	// runners and locks (which verifies the owned locks too) and a full
	// rebalance, in case a watch event was missed. Default 10s.
	RebalanceInterval time.Duration `key:"sharding.rebalance_interval"`
	// LockRefreshInterval is how often owned locks are verified with one
	// read of shards/ while the membership stream is out of sync (between
	// a break and the listing that resumes it). While it is in sync the
	// stream reports every change of the locks, and no read is made.
	// Must be ≤ LeaseTTL/3. Zero follows LeaseTTL: LeaseTTL/3.
	LockRefreshInterval time.Duration `key:"sharding.lock_refresh_interval"`
	// AcquireRetryInterval is the pause between tries at shards assigned to
	// this runner but not acquired, whose lock the membership view shows
	// free (a try lost a race, or the view has not caught up with the
	// holder a try met). A shard whose lock the view shows held elsewhere
	// is not tried: the membership stream reports the lock's deletion, and
	// the shard is acquired then. Default 200ms.
	AcquireRetryInterval time.Duration `key:"sharding.acquire_retry_interval"`
	// AcquireRetryWindow is how long such tries go on before giving up
	// until the next rebalance (the membership stream still acquires a
	// shard the moment its lock is deleted). 0 disables retries. Default 2s.
	AcquireRetryWindow time.Duration `key:"sharding.acquire_retry_window"`
	// StartupQuiet is how long the runner view must stay unchanged before
	// a starting runner makes its first acquisition, so that runners
	// started together each lock their final share at once instead of
	// the first one locking every shard and handing them over as the
	// others register (see settle.go). Zero follows RebalanceDebounce,
	// which coalesces bursts of membership changes as this waits one out:
	// 4 × RebalanceDebounce (at most 1m), 1s with its default, and no wait
	// with a RebalanceDebounce of 0.
	StartupQuiet time.Duration
	// StartupSettleMax bounds that wait, counted from the registration: a
	// membership that keeps changing delays the first acquisition by at
	// most this. Zero means the default, 5s; a negative value turns the
	// wait off.
	StartupSettleMax time.Duration
	// InterruptTimeout bounds the wait for a shard's handlers to stop and
	// hand over in-flight work on a planned release, and on stop the wait
	// for every handler to return before the lease is revoked (a Handler
	// that is a Quiescer). The entity host counts the handlers still
	// running after it as overruns. Default 5s.
	InterruptTimeout time.Duration `key:"sharding.interrupt_timeout"`
	// ProbeInterval is how often a detached runner makes a cheap storage
	// read, so that healthy signals keep arriving and it can re-attach.
	// Default 500ms.
	ProbeInterval time.Duration
}

// DefaultConfig returns the defaults for a 10s lease.
func DefaultConfig() Config { return DefaultConfigFor(10 * time.Second) }

// DefaultConfigFor returns the defaults scaled to a lease TTL.
func DefaultConfigFor(leaseTTL time.Duration) Config {
	d := detachment.DeriveFromLease(leaseTTL)
	return Config{
		LeaseTTL:             leaseTTL,
		KeepAliveInterval:    d.KeepAliveInterval,
		KeepAliveTimeout:     d.KeepAliveTimeout,
		Detachment:           detachment.DefaultConfig(leaseTTL),
		RebalanceDebounce:    250 * time.Millisecond,
		RebalanceInterval:    10 * time.Second,
		LockRefreshInterval:  d.LockRefreshInterval,
		AcquireRetryInterval: 200 * time.Millisecond,
		AcquireRetryWindow:   2 * time.Second,
		InterruptTimeout:     5 * time.Second,
		ProbeInterval:        500 * time.Millisecond,
		StartupSettleMax:     defaultStartupSettleMax,
	}
}

// The start-up settle's defaults. A group of runners started together
// registers with gaps well under a second between one and the next, even
// on a loaded machine (0.6s for all of 10 processes on a loaded 2-core
// machine): the quiet period, startupQuietDebounces × RebalanceDebounce,
// is 1s by default. The bound keeps a churning membership from holding a
// runner back for long.
const (
	startupQuietDebounces   = 4
	defaultStartupSettleMax = 5 * time.Second
)

// WithDefaults returns c with its zero lease intervals (keep-alive
// interval and timeout, lock refresh, detach margin) derived from LeaseTTL
// by detachment.DeriveFromLease, the one rule every component follows,
// a zero StartupQuiet derived from RebalanceDebounce and a zero
// StartupSettleMax at its default. Other zero fields stay zero: Validate
// says what they must be.
func (c Config) WithDefaults() Config {
	if c.StartupQuiet == 0 {
		c.StartupQuiet = min(startupQuietDebounces*c.RebalanceDebounce, time.Minute)
	}
	if c.StartupSettleMax == 0 {
		c.StartupSettleMax = defaultStartupSettleMax
	}
	d := detachment.DeriveFromLease(c.LeaseTTL)
	if c.KeepAliveInterval == 0 {
		c.KeepAliveInterval = d.KeepAliveInterval
	}
	if c.KeepAliveTimeout == 0 {
		c.KeepAliveTimeout = d.KeepAliveTimeout
	}
	if c.LockRefreshInterval == 0 {
		c.LockRefreshInterval = d.LockRefreshInterval
	}
	c.Detachment = c.Detachment.WithLeaseDefaults(c.LeaseTTL)
	return c
}

// ConfigError names the field that failed validation.
type ConfigError struct {
	Field string // Go field name, e.g. "LockRefreshInterval"
	// Key is the field's configuration key, e.g.
	// "sharding.lock_refresh_interval": the name a runner's config file and
	// the CLI use (the field's key tag); "" for a field a runner does not
	// expose.
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
	return fmt.Sprintf("sharding: invalid config: %s = %s: %s", name, e.Value, e.Rule)
}

// Setting is the error without its package's prefix: "key = value: rule".
func (e *ConfigError) Setting() string {
	name := e.Key
	if name == "" {
		name = e.Field
	}
	return fmt.Sprintf("%s = %s: %s", name, e.Value, e.Rule)
}

// keyOf is the configuration key of Config's field (its key tag), or ""
// for a field that has none.
func keyOf(field string) string {
	if f, ok := reflect.TypeFor[Config]().FieldByName(field); ok {
		return f.Tag.Get("key")
	}
	return ""
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) hold.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Validate checks every bound; the error joins one *ConfigError (or
// detachment.ConfigError) per bad field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, v time.Duration, rule string) {
		errs = append(errs, &ConfigError{Field: field, Key: keyOf(field), Value: v.String(), Rule: rule})
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0 {
		bad("LeaseTTL", c.LeaseTTL, "must be a whole number of seconds ≥ 1s (etcd's granularity)")
	}
	if err := c.Detachment.Validate(c.LeaseTTL); err != nil {
		errs = append(errs, err)
	}
	if c.KeepAliveTimeout <= 0 || c.KeepAliveTimeout > c.LeaseTTL/2 {
		bad("KeepAliveTimeout", c.KeepAliveTimeout, fmt.Sprintf("must be in (0, lease.ttl/2 = %s]", c.LeaseTTL/2))
	}
	if cutoff := c.LeaseTTL - c.Detachment.DetachMargin; c.KeepAliveInterval <= 0 || c.KeepAliveInterval+c.KeepAliveTimeout >= cutoff {
		bad("KeepAliveInterval", c.KeepAliveInterval, fmt.Sprintf("must be > 0 and, plus lease.keepalive_timeout %s, below lease.ttl − detachment.margin = %s: a healthy runner must renew before its cutoff", c.KeepAliveTimeout, cutoff))
	}
	if c.RebalanceDebounce < 0 || c.RebalanceDebounce > time.Minute {
		bad("RebalanceDebounce", c.RebalanceDebounce, "must be in [0, 1m]")
	}
	if c.RebalanceInterval < time.Second {
		bad("RebalanceInterval", c.RebalanceInterval, "must be ≥ 1s")
	}
	if c.LockRefreshInterval <= 0 || c.LockRefreshInterval > c.LeaseTTL/3 {
		bad("LockRefreshInterval", c.LockRefreshInterval, fmt.Sprintf("must be in (0, lease.ttl/3 = %s]", c.LeaseTTL/3))
	}
	if c.AcquireRetryInterval < 10*time.Millisecond {
		bad("AcquireRetryInterval", c.AcquireRetryInterval, "must be ≥ 10ms")
	}
	if c.AcquireRetryWindow < 0 {
		bad("AcquireRetryWindow", c.AcquireRetryWindow, "must be ≥ 0 (0 disables retries)")
	}
	if c.StartupQuiet < 0 || c.StartupQuiet > time.Minute {
		bad("StartupQuiet", c.StartupQuiet, "must be in [0, 1m] (0: 4 × sharding.rebalance_debounce)")
	}
	if c.StartupSettleMax > time.Minute {
		bad("StartupSettleMax", c.StartupSettleMax, "must be ≤ 1m (0: the default; negative: no wait)")
	}
	if c.InterruptTimeout <= 0 {
		bad("InterruptTimeout", c.InterruptTimeout, "must be > 0")
	}
	if c.ProbeInterval < 10*time.Millisecond || c.ProbeInterval > c.LeaseTTL {
		bad("ProbeInterval", c.ProbeInterval, fmt.Sprintf("must be in [10ms, lease.ttl %s]", c.LeaseTTL))
	}
	return errors.Join(errs...)
}
