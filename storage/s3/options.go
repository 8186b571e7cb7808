package s3

import (
	"fmt"
	"time"
)

// Defaults of a Store.
const (
	// DefaultRequestTimeout bounds every call, retries included.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultMaxObjectSize is the largest body Get reads (16 MiB); task
	// objects are kilobytes, so anything near it is a bug or corruption.
	DefaultMaxObjectSize = 16 << 20
	// DefaultTimeMaxAge is how old the clock estimate may grow before
	// ServerTime refreshes it with a request of its own.
	DefaultTimeMaxAge = time.Minute
	// DefaultDateResolution is how far behind the server's clock a Date
	// header may read. HTTP dates are truncated to the second, and servers
	// built on fasthttp (VersityGW among them) also cache the header and
	// refresh it once a second, so a Date can trail the clock by up to two
	// seconds. Against AWS S3 itself one second suffices.
	DefaultDateResolution = 2 * time.Second
)

// MaxKeyLength is the longest key S3 accepts, in bytes, prefix included.
const MaxKeyLength = 1024

// Observer is told about every request a Store makes to S3: the operation
// name (as in storage.OpError.Op, plus "check" and "servertime"), its
// outcome (nil or the *storage.OpError returned) and how long it took,
// retries included. It must be safe for concurrent use and quick.
type Observer func(op string, err error, d time.Duration)

type options struct {
	prefix         string
	requestTimeout time.Duration
	maxObjectSize  int64
	timeMaxAge     time.Duration
	dateResolution time.Duration
	observer       Observer
}

func defaultOptions() options {
	return options{
		requestTimeout: DefaultRequestTimeout,
		maxObjectSize:  DefaultMaxObjectSize,
		timeMaxAge:     DefaultTimeMaxAge,
		dateResolution: DefaultDateResolution,
	}
}

// Option configures a Store.
type Option func(*options)

// WithPrefix places every key under prefix inside the bucket, e.g.
// "tenure/<cluster>/". Keys passed to and returned by the Store are relative
// to it. Default "".
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithRequestTimeout bounds every call, SDK retries included. Default
// DefaultRequestTimeout.
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.requestTimeout = d } }

// WithMaxObjectSize caps the body Get reads, in bytes; larger objects give
// storage.ErrTooLarge. Default DefaultMaxObjectSize.
func WithMaxObjectSize(n int64) Option { return func(o *options) { o.maxObjectSize = n } }

// WithTimeMaxAge sets how old the clock estimate may be before ServerTime
// makes its own request; 0 makes every ServerTime call a request. Default
// DefaultTimeMaxAge.
func WithTimeMaxAge(d time.Duration) Option { return func(o *options) { o.timeMaxAge = d } }

// WithDateResolution sets how far behind the server's clock its Date header
// may read (see DefaultDateResolution). Too small a value makes the clock
// estimate overconfident.
func WithDateResolution(d time.Duration) Option { return func(o *options) { o.dateResolution = d } }

// WithObserver reports every request to o, for metrics and tracing.
func WithObserver(o Observer) Option { return func(opts *options) { opts.observer = o } }

func (o options) validate() error {
	if err := checkKeyChars(o.prefix); err != nil {
		return &ConfigError{"WithPrefix", fmt.Sprintf("%q: %v", o.prefix, err)}
	}
	if len(o.prefix) >= MaxKeyLength {
		return &ConfigError{"WithPrefix", fmt.Sprintf("%d bytes leaves no room for keys (S3 keys are at most %d bytes)", len(o.prefix), MaxKeyLength)}
	}
	if o.requestTimeout <= 0 {
		return &ConfigError{"WithRequestTimeout", fmt.Sprintf("%s must be positive", o.requestTimeout)}
	}
	if o.maxObjectSize <= 0 {
		return &ConfigError{"WithMaxObjectSize", fmt.Sprintf("%d must be positive", o.maxObjectSize)}
	}
	if o.timeMaxAge < 0 {
		return &ConfigError{"WithTimeMaxAge", fmt.Sprintf("%s is negative", o.timeMaxAge)}
	}
	if o.dateResolution <= 0 {
		return &ConfigError{"WithDateResolution", fmt.Sprintf("%s must be positive", o.dateResolution)}
	}
	return nil
}
