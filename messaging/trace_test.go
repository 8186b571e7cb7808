package messaging_test

import (
	"testing"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/messaging"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestSpanPairSharesTrace(t *testing.T) {
	testenv.CheckLeaks(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(ctxT(t))
	v := newView()
	// Separate providers would do as well: the context crosses the wire.
	v.runner("b", serve(t, &fake{name: "b"}, messaging.WithTracerProvider(tp)))
	v.lock("b", 5)
	c, _ := v.client(t, messaging.WithTracerProvider(tp))
	if _, err := c.Call(ctxT(t), "echo", "e1", nil); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	client, server := clientServer(spans)
	if client == nil || server == nil {
		t.Fatalf("spans %+v: want a client and a server span", spans)
	}
	if server.SpanContext.TraceID() != client.SpanContext.TraceID() || server.Parent.SpanID() != client.SpanContext.SpanID() {
		t.Fatalf("server span (trace %s, parent %s) is not the child of the client span (trace %s, span %s)",
			server.SpanContext.TraceID(), server.Parent.SpanID(), client.SpanContext.TraceID(), client.SpanContext.SpanID())
	}
	attrs := map[string]string{}
	for _, a := range client.Attributes {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	for k, want := range map[string]string{"tenure.entity.type": "echo", "tenure.entity.id": "e1", "tenure.epoch": "5", "tenure.attempts": "1", "tenure.outcome": "ok"} {
		if attrs[k] != want {
			t.Errorf("client span %s = %q, want %q", k, attrs[k], want)
		}
	}
}

// TestGlobalProviderSpans: a Client on the process's global tracer
// provider starts no span of its own while no SDK is installed there,
// and still sends its caller's trace context (the owner's span joins the
// caller's trace); once one is installed, its calls start client spans
// through it.
func TestGlobalProviderSpans(t *testing.T) {
	testenv.CheckLeaks(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(ctxT(t))
	v := newView()
	v.runner("b", serve(t, &fake{name: "b"}, messaging.WithTracerProvider(tp)))
	v.lock("b", 5)
	c, _ := v.client(t, messaging.WithTracerProvider(otel.GetTracerProvider()))

	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(ctxT(t), caller)
	if _, err := c.Call(ctx, "echo", "e1", nil); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].SpanKind != trace.SpanKindServer {
		t.Fatalf("spans %+v: want the owner's server span alone", spans)
	}
	if spans[0].SpanContext.TraceID() != caller.TraceID() || spans[0].Parent.SpanID() != caller.SpanID() {
		t.Fatalf("server span (trace %s, parent %s): want the caller's trace %s and span %s as its parent",
			spans[0].SpanContext.TraceID(), spans[0].Parent.SpanID(), caller.TraceID(), caller.SpanID())
	}

	exp.Reset()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	if _, err := c.Call(ctx, "echo", "e1", nil); err != nil {
		t.Fatal(err)
	}
	spans = exp.GetSpans()
	client, server := clientServer(spans)
	if client == nil || server == nil || server.Parent.SpanID() != client.SpanContext.SpanID() || client.Parent.SpanID() != caller.SpanID() {
		t.Fatalf("with an SDK installed: spans %+v: want a client span under the caller's and the server span under it", spans)
	}
}

// clientServer returns the client span and the server span of spans (nil
// for one it lacks).
func clientServer(spans tracetest.SpanStubs) (client, server *tracetest.SpanStub) {
	for i := range spans {
		switch spans[i].SpanKind {
		case trace.SpanKindClient:
			client = &spans[i]
		case trace.SpanKindServer:
			server = &spans[i]
		}
	}
	return client, server
}
