//go:build unix

package external

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestExecHandlerTraceparent: an exec: command gets the trace context of
// the handler's context (the attempt's execute span) in TRACEPARENT,
// TRACESTATE and BAGGAGE, never the one the runner was started with.
func TestExecHandlerTraceparent(t *testing.T) {
	t.Setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01")
	t.Setenv("BAGGAGE", "stale=1")
	h, err := NewHandler(`exec:printf '{"tp":"%s","ts":"%s","bg":"%s"}' "${TRACEPARENT:-}" "${TRACESTATE:-}" "${BAGGAGE:-}"`, nil)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ts, _ := trace.ParseTraceState("vendor=x")
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(handlerCtx(t), parent)
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	ctx = baggage.ContextWithBaggage(ctx, bag)
	ctx, span := tp.Tracer("test").Start(ctx, "tenure.task.execute")
	defer span.End()

	out, err := h(ctx, handlerTask(""))
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ TP, TS, BG string }
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if got.TP != want || got.TS != "vendor=x" || got.BG != "tenant=acme" {
		t.Fatalf("command saw TRACEPARENT %q TRACESTATE %q BAGGAGE %q; want %q, vendor=x, tenant=acme", got.TP, got.TS, got.BG, want)
	}

	// Outside a trace: no trace context at all, not the runner's.
	out, err = h(handlerCtx(t), handlerTask(""))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &got); err != nil || got.TP != "" || got.BG != "" {
		t.Fatalf("untraced: %s (%v); want no TRACEPARENT or BAGGAGE", out, err)
	}
}
