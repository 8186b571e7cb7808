package childspan

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestSpansOnlyUnderAParent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := TracerProvider(tp).Tracer("test")

	ctx, root := tr.Start(context.Background(), "background")
	if root.IsRecording() || root.SpanContext().IsValid() {
		t.Fatalf("a span with no parent was started: %v", root.SpanContext())
	}
	root.End()
	if trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("the context of a dropped span carries a span context")
	}

	pctx, parent := tp.Tracer("test").Start(context.Background(), "operation")
	_, child := tr.Start(pctx, "call")
	child.End()
	parent.End()

	// A remote parent (a traceparent read from a task) counts too.
	remote := trace.ContextWithRemoteSpanContext(context.Background(), parent.SpanContext())
	_, child2 := tr.Start(remote, "call2")
	child2.End()

	ended := rec.Ended()
	if len(ended) != 3 {
		t.Fatalf("ended spans: %d, want 3 (operation, call, call2)", len(ended))
	}
	for _, s := range ended {
		if s.Name() == "background" {
			t.Fatal("the background span was recorded")
		}
		if s.Name() != "operation" && s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Fatalf("%s: parent %s, want %s", s.Name(), s.Parent().SpanID(), parent.SpanContext().SpanID())
		}
	}
}
