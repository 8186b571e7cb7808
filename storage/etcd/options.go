package etcd

import (
	"log/slog"
	"time"
)

// Defaults.
const (
	// DefaultPrefix is the key prefix of the default cluster.
	DefaultPrefix = "/tenure/default/"
	// DefaultRequestTimeout bounds every etcd call but keep-alives.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultAcquireBatch is how many shard locks one transaction attempts.
	DefaultAcquireBatch = 64
	// DefaultAcquireConcurrency is how many acquire transactions run at once.
	DefaultAcquireConcurrency = 4
	// DefaultRetryBackoff is the first delay before retrying a failed
	// keep-alive or a broken watch; it doubles up to the keep-alive interval
	// (keep-alives) or DefaultMaxWatchBackoff (watches).
	DefaultRetryBackoff = 200 * time.Millisecond
	// DefaultMaxWatchBackoff caps the delay between watch re-lists.
	DefaultMaxWatchBackoff = 5 * time.Second
)

type options struct {
	prefix             string
	requestTimeout     time.Duration
	keepAliveInterval  time.Duration // 0: TTL/3
	keepAliveTimeout   time.Duration // 0: TTL/6, at least 200ms
	retryBackoff       time.Duration
	acquireBatch       int
	acquireConcurrency int
	logger             *slog.Logger
}

func defaultOptions() options {
	return options{
		prefix:             DefaultPrefix,
		requestTimeout:     DefaultRequestTimeout,
		retryBackoff:       DefaultRetryBackoff,
		acquireBatch:       DefaultAcquireBatch,
		acquireConcurrency: DefaultAcquireConcurrency,
		logger:             slog.New(slog.DiscardHandler),
	}
}

// Option configures a Store.
type Option func(*options)

// WithPrefix sets the key prefix; it gains a trailing "/" if missing. Use
// "/tenure/<cluster>/" to run several clusters on one etcd.
func WithPrefix(prefix string) Option {
	return func(o *options) {
		if prefix != "" && prefix[len(prefix)-1] != '/' {
			prefix += "/"
		}
		o.prefix = prefix
	}
}

// WithRequestTimeout bounds every etcd call other than keep-alives.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) { o.requestTimeout = d }
}

// WithKeepAliveInterval sets the time between confirmed keep-alives
// (default: a third of the lease TTL).
func WithKeepAliveInterval(d time.Duration) Option {
	return func(o *options) { o.keepAliveInterval = d }
}

// WithKeepAliveTimeout bounds one keep-alive call (default: a sixth of the
// lease TTL, at least 200ms).
func WithKeepAliveTimeout(d time.Duration) Option {
	return func(o *options) { o.keepAliveTimeout = d }
}

// WithRetryBackoff sets the first delay before retrying a failed keep-alive
// (so one lost response does not consume the detach margin) or re-listing a
// broken watch; the delay doubles on each further failure.
func WithRetryBackoff(d time.Duration) Option {
	return func(o *options) { o.retryBackoff = d }
}

// WithAcquireConcurrency sets how many acquire transactions of up to
// batch shards each run at once.
func WithAcquireConcurrency(transactions, batch int) Option {
	return func(o *options) {
		o.acquireConcurrency = transactions
		o.acquireBatch = batch
	}
}

// WithLogger sets the logger for background events (watch re-lists,
// keep-alive retries). Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}
