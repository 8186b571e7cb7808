package task

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Defaults.
const (
	// DefaultMaxInputSize is the largest task input accepted, in bytes
	// (256 KiB): tasks are read whole on every claim, so big payloads belong
	// in objects of their own, referenced from the input.
	DefaultMaxInputSize = 256 << 10
	// DefaultHistoryLimit is how many transitions a task keeps.
	DefaultHistoryLimit = 32
	// DefaultMaxAttempts is how many claims a task gets before it fails.
	DefaultMaxAttempts = 5
	// DefaultTimeout bounds one attempt of a task.
	DefaultTimeout = 5 * time.Minute
	// MaxCorruptKeep is how much of a corrupt body Load keeps (64 KiB).
	MaxCorruptKeep = 64 << 10
	// maxErrorLen and maxDetailLen bound the error text kept in Task.Error
	// and in a history entry, so a handler's huge error cannot bloat the
	// object.
	maxErrorLen  = 4 << 10
	maxDetailLen = 512
)

// Options are the Store's limits.
type Options struct {
	// MaxInputSize is the largest input Submit accepts, in bytes. Must be
	// ≥ 1. Default DefaultMaxInputSize.
	MaxInputSize int
	// HistoryLimit is how many transitions a task keeps (the newest); older
	// ones are dropped and counted in Task.HistoryDropped. Must be ≥ 1.
	// Default DefaultHistoryLimit.
	HistoryLimit int
}

// DefaultOptions returns the default Options.
func DefaultOptions() Options {
	return Options{MaxInputSize: DefaultMaxInputSize, HistoryLimit: DefaultHistoryLimit}
}

// Validate names the first field out of range.
func (o Options) Validate() error {
	if o.MaxInputSize < 1 {
		return &ValidationError{Field: "Options.MaxInputSize", Value: strconv.Itoa(o.MaxInputSize), Rule: "must be at least 1 byte"}
	}
	if o.HistoryLimit < 1 {
		return &ValidationError{Field: "Options.HistoryLimit", Value: strconv.Itoa(o.HistoryLimit), Rule: "must be at least 1"}
	}
	return nil
}

// SubmitDefaults are what Submit uses for the fields a SubmitRequest leaves
// zero.
type SubmitDefaults struct {
	// MaxAttempts is how many claims a task gets before it fails. Must be
	// ≥ 1. Default DefaultMaxAttempts (5).
	MaxAttempts int
	// Timeout bounds one attempt. Must be > 0. Default DefaultTimeout (5m).
	Timeout time.Duration
	// Retry spaces retries. Default DefaultRetry(): 1s doubling to 5m, ±20%.
	Retry RetryPolicy
}

// DefaultSubmit returns the default SubmitDefaults.
func DefaultSubmit() SubmitDefaults {
	return SubmitDefaults{MaxAttempts: DefaultMaxAttempts, Timeout: DefaultTimeout, Retry: DefaultRetry()}
}

// Validate names the first field out of range.
func (d SubmitDefaults) Validate() error {
	if d.MaxAttempts < 1 {
		return &ValidationError{Field: "SubmitDefaults.MaxAttempts", Value: strconv.Itoa(d.MaxAttempts), Rule: "must be at least 1"}
	}
	if d.Timeout <= 0 {
		return &ValidationError{Field: "SubmitDefaults.Timeout", Value: d.Timeout.String(), Rule: "must be positive"}
	}
	if err := d.Retry.Validate(); err != nil {
		return fmt.Errorf("SubmitDefaults.Retry: %w", err)
	}
	return nil
}

// withDefaults fills the zero fields of d from DefaultSubmit.
func (d SubmitDefaults) withDefaults() SubmitDefaults {
	def := DefaultSubmit()
	if d.MaxAttempts == 0 {
		d.MaxAttempts = def.MaxAttempts
	}
	if d.Timeout == 0 {
		d.Timeout = def.Timeout
	}
	if d.Retry == (RetryPolicy{}) {
		d.Retry = def.Retry
	}
	return d
}

// Clock returns the authoritative time.
type Clock func(ctx context.Context) (storage.ServerTime, error)

type storeOptions struct {
	Options
	clock  Clock
	rnd    func() float64
	logger *slog.Logger
}

// Option configures a Store.
type Option func(*storeOptions)

// WithMaxInputSize sets Options.MaxInputSize; values < 1 are ignored.
func WithMaxInputSize(n int) Option {
	return func(o *storeOptions) {
		if n >= 1 {
			o.MaxInputSize = n
		}
	}
}

// WithHistoryLimit sets Options.HistoryLimit; values < 1 are ignored.
func WithHistoryLimit(n int) Option {
	return func(o *storeOptions) {
		if n >= 1 {
			o.HistoryLimit = n
		}
	}
}

// WithRand sets the source of retry jitter; tests seed it for repeatable
// delays. Default math/rand/v2's global source.
func WithRand(src rand.Source) Option {
	return func(o *storeOptions) {
		if src == nil {
			return
		}
		var mu sync.Mutex
		r := rand.New(src)
		o.rnd = func() float64 {
			mu.Lock()
			defer mu.Unlock()
			return r.Float64()
		}
	}
}

// WithClock sets where task times come from. Default the object store's
// ServerTime, the authoritative clock; never set it to the local clock
// outside tests.
func WithClock(c Clock) Option {
	return func(o *storeOptions) {
		if c != nil {
			o.clock = c
		}
	}
}

// WithLogger sets the logger of best-effort failures (a pointer that could
// not be deleted, a wake-up that failed, a malformed key skipped). Default
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *storeOptions) {
		if l != nil {
			o.logger = l
		}
	}
}
