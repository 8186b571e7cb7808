package etcd

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/internal/childspan"
)

// DialConfig says how to reach an etcd cluster.
type DialConfig struct {
	Endpoints   []string      // client URLs, e.g. "http://127.0.0.1:2379"; required
	DialTimeout time.Duration // bound on connecting and authenticating; 0 = 5s
	TLS         *tls.Config   // nil for plain connections
	Username    string        // etcd auth user; empty disables auth
	Password    string        // etcd auth password
	// Logger receives the client's own logs; nil discards them.
	Logger *zap.Logger
	// TracerProvider receives a client span per etcd call made under a
	// span (see tracingDialOption); nil means the global provider
	// (otel.GetTracerProvider()), one set after Dial included.
	TracerProvider trace.TracerProvider
}

// Dial connects to etcd, checks the connection with a bounded status call on
// the first endpoint that answers, and returns a Store that owns (and will
// close) the client.
func Dial(ctx context.Context, c DialConfig, opts ...Option) (*Store, error) {
	if len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("etcd: dial: %w: no endpoints", storage.ErrInvalid)
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	lg := c.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	endpoint := strings.Join(c.Endpoints, ",")
	dctx, cancel := context.WithTimeout(ctx, c.DialTimeout)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: c.DialTimeout,
		TLS:         c.TLS,
		Username:    c.Username,
		Password:    c.Password,
		Logger:      lg,
		Context:     context.WithoutCancel(ctx),
		DialOptions: []grpc.DialOption{tracingDialOption(c.TracerProvider)},
	})
	if err != nil {
		return nil, &storage.OpError{Backend: "etcd", Op: "dial", Endpoint: endpoint, Err: classify(ctx, c.DialTimeout, err)}
	}
	var lastErr error
	for _, ep := range c.Endpoints {
		if _, lastErr = cli.Status(dctx, ep); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		cli.Close()
		return nil, &storage.OpError{Backend: "etcd", Op: "dial", Endpoint: endpoint, Err: classify(ctx, c.DialTimeout, lastErr)}
	}
	s, err := New(cli, opts...)
	if err != nil {
		cli.Close()
		return nil, err
	}
	s.ownClient = true
	return s, nil
}

// tracingDialOption instruments the etcd client's gRPC calls with the OTel
// contrib stats handler, through childspan: only a call made under a span
// (a task's claim, a submit's wake-up) has a span. The runner's own loops
// (lease keep-alives, watches, lock checks) run under no span and record
// none, so that an idle cluster sends no trace every tick. The trace
// context is propagated in the call's metadata, which etcd ignores.
func tracingDialOption(tp trace.TracerProvider) grpc.DialOption {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(childspan.TracerProvider(tp))))
}
