package childspan

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// TracerProvider returns a provider whose tracers start a span through tp
// only when the context already holds a valid span context (local or
// remote); otherwise they start nothing and return the context unchanged,
// with a non-recording span.
func TracerProvider(tp trace.TracerProvider) trace.TracerProvider {
	return provider{tp: tp}
}

type provider struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (p provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return tracer{t: p.tp.Tracer(name, opts...)}
}

type tracer struct {
	embedded.Tracer
	t trace.Tracer
}

func (t tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		// SpanFromContext of a context with no span is a no-op span:
		// ending it, or setting attributes on it, does nothing.
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.t.Start(ctx, name, opts...)
}
