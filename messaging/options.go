package messaging

import (
	"crypto/tls"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tenurehq/tenure/routing"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Option configures a Client or a Server; each says which it applies to,
// and the other ignores it.
type Option func(*options)

type options struct {
	logger   *slog.Logger
	registry prometheus.Registerer
	tracer   trace.TracerProvider
	tls      *tls.Config
	table    *routing.Table
	local    Deliverer
	self     string
}

func newOptions(opts []Option) options {
	o := options{logger: slog.New(slog.DiscardHandler), tracer: noop.NewTracerProvider()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithLogger sets the logger (default: discard). Client and Server.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithRegisterer registers the metrics with r (default: none). A collector
// already registered there (a second Client on one registry) is reused.
// Client and Server.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) { o.registry = r }
}

// WithTracerProvider sets where spans go (default: a no-op provider, which
// also sends no trace context). Client and Server.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) {
		if tp != nil {
			o.tracer = tp
		}
	}
}

// WithTLS sets the TLS configuration: on a Server, its certificate (and
// client verification for mutual TLS); on a Client, the roots it verifies
// owners against (and its certificate for mutual TLS). See TLSConfig.
// Default: plaintext.
func WithTLS(c *tls.Config) Option {
	return func(o *options) { o.tls = c }
}

// WithTable gives a Server the runner's routing view, from which a refusal
// names the shard's holder for the caller to re-route to. Server only.
func WithTable(t *routing.Table) Option {
	return func(o *options) { o.table = t }
}

// WithLocal makes a Client deliver calls to entities that runner self owns
// straight to d, without the network. Client only.
func WithLocal(self string, d Deliverer) Option {
	return func(o *options) { o.self, o.local = self, d }
}
