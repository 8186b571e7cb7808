package runner

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys of the trace context, as the OpenTelemetry log data
// model names the fields.
const (
	LogKeyTraceID = "trace_id"
	LogKeySpanID  = "span_id"
)

// traceHandler adds the trace context of a record's context to the record.
type traceHandler struct{ next slog.Handler }

// NewTraceHandler wraps h so that a record logged with a context holding a
// valid span (log.InfoContext(ctx, ...) in a traced task) carries its
// trace_id and span_id, in hex as in a traceparent header: a log line
// leads to its trace and back. Records without one are passed on as they
// are.
func NewTraceHandler(h slog.Handler) slog.Handler { return traceHandler{next: h} }

func (h traceHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String(LogKeyTraceID, sc.TraceID().String()), slog.String(LogKeySpanID, sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{next: h.next.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{next: h.next.WithGroup(name)}
}
