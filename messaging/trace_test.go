package messaging_test

import (
	"testing"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/messaging"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
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
	var client, server *tracetest.SpanStub
	spans := exp.GetSpans()
	for i := range spans {
		switch spans[i].SpanKind {
		case trace.SpanKindClient:
			client = &spans[i]
		case trace.SpanKindServer:
			server = &spans[i]
		}
	}
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
