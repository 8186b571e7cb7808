package detachment

import (
	"errors"
	"fmt"
	"reflect"
	"time"
)

// Mode says what the machine does with its decisions.
type Mode string

const (
	// ModeOff never detaches on its own: only the starting state (before the
	// first keep-alive) and explicit Detach calls leave the runner detached.
	// Decisions are still computed silently, so that a later switch to
	// ModeEnforce acts on them at once.
	ModeOff Mode = "off"
	// ModeObserve computes every decision and reports it as WouldDetach and
	// WouldAttach transitions, but never interrupts: it is the canary step of
	// a staged rollout (off → observe → enforce).
	ModeObserve Mode = "observe"
	// ModeEnforce detaches and re-attaches as decided. It is the default.
	ModeEnforce Mode = "enforce"
)

// Default values of Config; DefaultConfig derives DetachMargin from the lease
// TTL.
const (
	DefaultRecoverWindow             = 2 * time.Second
	DefaultKeepAliveFailureThreshold = 2
	DefaultStorageErrorGrace         = time.Second
)

// ErrInvalidConfig is wrapped by every error Validate, New and SetConfig
// return for a bad Config; errors.As with *ConfigError gives the field.
var ErrInvalidConfig = errors.New("detachment: invalid config")

// ConfigError names the Config field that failed validation.
type ConfigError struct {
	Field string // Go field name, e.g. "DetachMargin"
	// Key is the field's configuration key, e.g. "detachment.margin": the
	// name a runner's config file and the CLI use (the field's key tag).
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
	return fmt.Sprintf("detachment: invalid config: %s = %s: %s", name, e.Value, e.Rule)
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

// Config tunes the machine. Every duration is wall-clock time measured on the
// machine's Clock. It can be changed at run time with Machine.SetConfig.
type Config struct {
	// Mode is off, observe or enforce (see the Mode constants). Default
	// enforce.
	Mode Mode `key:"detachment.mode"`

	// DetachMargin is the safety margin, subtracted from the lease deadline,
	// at which the runner detaches if no keep-alive has pushed the deadline
	// further: the time left for entities to stop and for clock drift between
	// this process and etcd before the lease can really expire. Must be in
	// (0, lease TTL). Default lease TTL / 3, one keep-alive period.
	DetachMargin time.Duration `key:"detachment.margin"`

	// RecoverWindow is how long the runner must stay healthy without any
	// failure after a detachment before it re-attaches; it keeps a flapping
	// connection from flapping the shards. Must be > 0. Default 2s.
	RecoverWindow time.Duration `key:"detachment.recover_window"`

	// KeepAliveFailureThreshold is the number of consecutive failed
	// keep-alives that detach at once, without waiting for the lease
	// deadline. Must be ≥ 1. Default 2: one lost response is tolerated.
	KeepAliveFailureThreshold int `key:"detachment.keepalive_failure_threshold"`

	// StorageErrorGrace is how long a storage error (get runners, acquire,
	// refresh) may stay unanswered by a successful storage call before the
	// runner detaches. Must be > 0. Default 1s.
	StorageErrorGrace time.Duration `key:"detachment.storage_error_grace"`
}

// DefaultConfig returns the defaults for a runner lease of leaseTTL: mode
// enforce, DetachMargin leaseTTL/3, RecoverWindow 2s, threshold 2 and
// StorageErrorGrace 1s.
func DefaultConfig(leaseTTL time.Duration) Config {
	return Config{
		Mode:                      ModeEnforce,
		DetachMargin:              DeriveFromLease(leaseTTL).DetachMargin,
		RecoverWindow:             DefaultRecoverWindow,
		KeepAliveFailureThreshold: DefaultKeepAliveFailureThreshold,
		StorageErrorGrace:         DefaultStorageErrorGrace,
	}
}

// Validate checks c for a runner lease of leaseTTL. The error joins one
// *ConfigError per bad field, each wrapping ErrInvalidConfig.
func (c Config) Validate(leaseTTL time.Duration) error {
	var errs []error
	bad := func(field, value, rule string) {
		key := keyOf(field)
		if field == "LeaseTTL" {
			key = "lease.ttl"
		}
		errs = append(errs, &ConfigError{Field: field, Key: key, Value: value, Rule: rule})
	}
	switch c.Mode {
	case ModeOff, ModeObserve, ModeEnforce:
	default:
		bad("Mode", fmt.Sprintf("%q", string(c.Mode)), `must be "off", "observe" or "enforce"`)
	}
	if leaseTTL <= 0 {
		bad("LeaseTTL", leaseTTL.String(), "must be > 0")
	} else if c.DetachMargin <= 0 || c.DetachMargin >= leaseTTL {
		// A margin ≥ the TTL could never be satisfied: the runner would
		// never attach.
		bad("DetachMargin", c.DetachMargin.String(), fmt.Sprintf("must be in (0, lease.ttl %s)", leaseTTL))
	}
	if c.RecoverWindow <= 0 {
		bad("RecoverWindow", c.RecoverWindow.String(), "must be > 0")
	}
	if c.KeepAliveFailureThreshold < 1 {
		bad("KeepAliveFailureThreshold", fmt.Sprint(c.KeepAliveFailureThreshold), "must be ≥ 1")
	}
	if c.StorageErrorGrace <= 0 {
		bad("StorageErrorGrace", c.StorageErrorGrace.String(), "must be > 0")
	}
	return errors.Join(errs...)
}
