package etcd

import (
	"log/slog"
	"time"
)

// Defaults.
const (
	// DefaultPrefix is the key prefix of the default cluster.
	DefaultPrefix = "/tenure/default/"
	// DefaultRequestTimeout bounds every etcd call but keep-alives (bounded
	// by Session.KeepAlive's caller).
	DefaultRequestTimeout = 5 * time.Second
	// DefaultAcquireBatch is how many shard locks one transaction attempts.
	DefaultAcquireBatch = 64
	// DefaultAcquireConcurrency is how many acquire transactions run at once.
	DefaultAcquireConcurrency = 4
	// DefaultRetryBackoff is the first delay before re-opening a broken
	// watch; it doubles up to DefaultMaxWatchBackoff.
	DefaultRetryBackoff = 200 * time.Millisecond
	// DefaultMaxWatchBackoff caps the delay between watch re-lists.
	DefaultMaxWatchBackoff = 5 * time.Second
)

type options struct {
	prefix             string
	requestTimeout     time.Duration
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

// WithRequestTimeout bounds every etcd call other than keep-alives, which
// Session.KeepAlive's caller bounds.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) { o.requestTimeout = d }
}

// WithRetryBackoff sets the first delay before re-listing a broken watch;
// the delay doubles on each further failure. Keep-alives have no store
// option: their cadence, retries included, is the session holder's (see
// storage.KeepAliveCadence).
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
// failed revokes). Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}
