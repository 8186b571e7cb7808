package runner

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// NewTracerProvider returns where the runner's spans go: an OTLP/gRPC
// exporter when c names a collector, nowhere otherwise. shutdown flushes
// and stops it.
func NewTracerProvider(ctx context.Context, c TracingConfig, runnerID string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if c.OTLPEndpoint == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(c.OTLPEndpoint)}
	if c.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: tracing.otlp_endpoint %s: %w", ErrInvalidConfig, c.OTLPEndpoint, err)
	}
	res := resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName("tenure"), semconv.ServiceInstanceID(runnerID), semconv.ServiceVersion(Version))
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, p.Shutdown, nil
}
