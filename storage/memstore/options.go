package memstore

import "time"

// Defaults of a Store, matching storage/s3's.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultMaxObjectSize  = 16 << 20
)

type options struct {
	clock          func() time.Time
	requestTimeout time.Duration
	maxObjectSize  int64
	hook           Hook
}

// Option configures a Store.
type Option func(*options)

// WithClock sets the clock that stamps LastModified and answers ServerTime.
// Default time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.clock = now
		}
	}
}

// WithRequestTimeout bounds every call, injected delays and hooks included.
// Default DefaultRequestTimeout; values ≤ 0 are ignored.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.requestTimeout = d
		}
	}
}

// WithMaxObjectSize caps the body Get returns, in bytes; larger objects give
// storage.ErrTooLarge. Default DefaultMaxObjectSize; values ≤ 0 are ignored.
func WithMaxObjectSize(n int64) Option {
	return func(o *options) {
		if n > 0 {
			o.maxObjectSize = n
		}
	}
}

// WithHook installs h around every operation (see Hook and Store.SetHook).
func WithHook(h Hook) Option { return func(o *options) { o.hook = h } }
