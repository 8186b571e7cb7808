package state

import "time"

// Defaults of the store's options.
const (
	// DefaultTimeout bounds each call (all its requests together).
	DefaultTimeout = 10 * time.Second
	// DefaultMaxSize is the largest encoded state Save writes: 1 MiB.
	DefaultMaxSize = 1 << 20
)

// Option configures a Store.
type Option func(*options)

type options struct {
	timeout time.Duration
	maxSize int
	now     func() time.Time
}

// WithTimeout bounds every call of the store, all its requests together
// (default DefaultTimeout).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithMaxSize sets the largest encoded state, in bytes, that Save writes
// (default DefaultMaxSize). The limit applies to the user's state, not the
// envelope around it.
func WithMaxSize(n int) Option { return func(o *options) { o.maxSize = n } }

// WithClock sets the clock of the envelopes' saved_at (default time.Now);
// saved_at is informational, never compared.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }
