package s3coord

import (
	"log/slog"
	"time"
)

// Defaults.
const (
	// DefaultRequestTimeout bounds every object-store call the store makes.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultMinPollInterval is the watch poll interval right after a
	// change: short enough that a join or a release reaches watchers well
	// within a keep-alive interval.
	DefaultMinPollInterval = 100 * time.Millisecond
	// DefaultMaxPollInterval is the idle poll interval: one LIST per kind
	// every 2s keeps an idle runner's request rate low (see doc.go) while a
	// lapsed lease is still noticed within a small fraction of a TTL.
	DefaultMaxPollInterval = 2 * time.Second
)

type options struct {
	requestTimeout time.Duration
	minPoll        time.Duration
	maxPoll        time.Duration
	endpoint       string
	logger         *slog.Logger
	now            func() time.Time
}

func defaultOptions() options {
	return options{
		requestTimeout: DefaultRequestTimeout,
		minPoll:        DefaultMinPollInterval,
		maxPoll:        DefaultMaxPollInterval,
		logger:         slog.New(slog.DiscardHandler),
		now:            time.Now,
	}
}

// Option configures a Store.
type Option func(*options)

// WithRequestTimeout bounds every object-store call; default
// DefaultRequestTimeout.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) { o.requestTimeout = d }
}

// WithPollInterval sets the watch polling bounds: polls run at min right
// after a change and back off towards max while nothing changes. Defaults:
// DefaultMinPollInterval and DefaultMaxPollInterval.
func WithPollInterval(min, max time.Duration) Option {
	return func(o *options) { o.minPoll, o.maxPoll = min, max }
}

// WithEndpoint names the object store (endpoint and bucket) in errors
// (storage.OpError.Endpoint).
func WithEndpoint(endpoint string) Option {
	return func(o *options) { o.endpoint = endpoint }
}

// WithLogger sets the logger for background events (failed polls, failed
// tombstones). Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithClock sets the local clock (send and answer times of keep-alives);
// tests inject one. Default: time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}
