package runner

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// consoleExporter is OTEL_TRACES_EXPORTER=console: one JSON object per
// span, one per line, for a look at spans with no collector. It writes
// what stdouttrace would, trimmed to what a reader needs, without another
// module.
type consoleExporter struct {
	mu sync.Mutex
	w  io.Writer
}

func newConsoleExporter(w io.Writer) *consoleExporter { return &consoleExporter{w: w} }

// consoleSpan is a span as the console exporter writes it.
type consoleSpan struct {
	Name       string         `json:"name"`
	TraceID    string         `json:"trace_id"`
	SpanID     string         `json:"span_id"`
	ParentID   string         `json:"parent_span_id,omitempty"`
	Kind       string         `json:"kind"`
	Start      time.Time      `json:"start"`
	Duration   string         `json:"duration"`
	Status     string         `json:"status,omitempty"`
	Message    string         `json:"status_message,omitempty"`
	Attributes map[string]any `json:"attributes,omitempty"`
	Service    string         `json:"service.name,omitempty"`
}

func (e *consoleExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	enc := json.NewEncoder(e.w)
	for _, s := range spans {
		cs := consoleSpan{
			Name: s.Name(), TraceID: s.SpanContext().TraceID().String(), SpanID: s.SpanContext().SpanID().String(),
			Kind: s.SpanKind().String(), Start: s.StartTime(), Duration: s.EndTime().Sub(s.StartTime()).String(),
		}
		if s.Parent().IsValid() {
			cs.ParentID = s.Parent().SpanID().String()
		}
		if st := s.Status(); st.Code != 0 {
			cs.Status, cs.Message = st.Code.String(), st.Description
		}
		if attrs := s.Attributes(); len(attrs) > 0 {
			cs.Attributes = make(map[string]any, len(attrs))
			for _, kv := range attrs {
				cs.Attributes[string(kv.Key)] = kv.Value.AsInterface()
			}
		}
		if v, ok := s.Resource().Set().Value("service.name"); ok {
			cs.Service = v.AsString()
		}
		if err := enc.Encode(cs); err != nil {
			return err
		}
	}
	return nil
}

func (*consoleExporter) Shutdown(context.Context) error { return nil }
