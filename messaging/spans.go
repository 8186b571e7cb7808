package messaging

import (
	"context"
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// A call starts a client span (tenure.call) and sends its trace context to
// the owner. Where the tracer provider can record nothing, the span is not
// started: starting one allocates a span and a context layer on every
// call, a twentieth of a local call's time, and changes nothing anyone
// sees. Those providers:
//
//   - the no-op provider (the default without WithTracerProvider), which
//     sends no trace context either;
//   - the process's global provider (otel.GetTracerProvider()) while no
//     SDK is installed in it: its tracers then make non-recording spans
//     that carry the caller's span context, so the call sends the
//     caller's trace context as it is, and the owner's span joins the
//     caller's trace as before. Once an SDK is installed
//     (otel.SetTracerProvider), later calls start spans through it.
type spanMode int

const (
	spansOn       spanMode = iota // start spans
	spansOff                      // the no-op provider: no span, no trace context
	spansIfGlobal                 // the global provider: spans once it has an SDK
)

// unsetGlobal is the type of the global tracer provider before any is
// installed (otel's delegating provider), read at start-up; nil, and no
// call ever skips its span, if it is not that type then (an SDK was
// installed earlier).
var unsetGlobal = func() reflect.Type {
	t := reflect.TypeOf(otel.GetTracerProvider())
	if t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global" {
		return t
	}
	return nil
}()

// spanModeOf says how calls on tp start spans.
func spanModeOf(tp trace.TracerProvider) spanMode {
	switch tp.(type) {
	case noop.TracerProvider, *noop.TracerProvider:
		return spansOff
	}
	if unsetGlobal != nil && reflect.TypeOf(tp) == unsetGlobal {
		return spansIfGlobal
	}
	return spansOn
}

// startSpan starts the call's client span, or does not (see spanMode):
// it returns the context to call under, the span (a non-recording one
// when none was started: ending it does nothing) and the trace context
// to send, nil for none.
func (c *Client) startSpan(ctx context.Context) (context.Context, trace.Span, map[string]string) {
	switch c.spans {
	case spansOff:
		return ctx, trace.SpanFromContext(context.Background()), nil
	case spansIfGlobal:
		if reflect.TypeOf(otel.GetTracerProvider()) == unsetGlobal {
			return ctx, trace.SpanFromContext(context.Background()), traceContext(ctx)
		}
	}
	ctx, span := c.tracer.Start(ctx, "tenure.call", trace.WithSpanKind(trace.SpanKindClient))
	return ctx, span, traceContext(ctx)
}

// serverSpan starts the owner's span (tenure.call.serve) under ctx, which
// carries the caller's trace context, or does not where the server's
// tracer provider can record nothing (see spanMode): the handler then
// runs under ctx as it is, whose span context is the caller's, as under a
// non-recording span's. It returns the span to annotate and end: when none
// was started, a non-recording one of its own (never a span ctx may carry
// from elsewhere), on which both do nothing.
func (s *Server) serverSpan(ctx context.Context) (context.Context, trace.Span) {
	switch s.spans {
	case spansOff:
		return ctx, trace.SpanFromContext(context.Background())
	case spansIfGlobal:
		if reflect.TypeOf(otel.GetTracerProvider()) == unsetGlobal {
			return ctx, trace.SpanFromContext(context.Background())
		}
	}
	return s.tracer.Start(ctx, "tenure.call.serve", trace.WithSpanKind(trace.SpanKindServer))
}

// traceContext is the W3C trace context of ctx's span, nil if it has none.
func traceContext(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	m := make(map[string]string, 2)
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(m))
	return m
}
