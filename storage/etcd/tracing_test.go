package etcd_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage/etcd"
)

// TestDialTracesCallsUnderASpan: the dialled client records a gRPC client
// span for a call made under a span and none for a call under no span (a
// keep-alive, a watch, a lock check), so an idle runner sends no traces.
func TestDialTracesCallsUnderASpan(t *testing.T) {
	srv := testenv.SharedEtcd(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := etcd.Dial(ctx, etcd.DialConfig{Endpoints: []string{srv.Endpoint()}, TracerProvider: tp},
		etcd.WithPrefix(testenv.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := len(rec.Ended()) // Dial's status check ran under no span
	if _, err := s.Client().Get(ctx, testenv.Prefix(t)+"x"); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 || before != 0 {
		t.Fatalf("calls under no span recorded %d spans", n)
	}

	pctx, parent := tp.Tracer("test").Start(ctx, "operation")
	if _, err := s.Client().Put(pctx, testenv.Prefix(t)+"x", "v"); err != nil {
		t.Fatal(err)
	}
	parent.End()
	var put sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == "etcdserverpb.KV/Put" {
			put = sp
		}
	}
	if put == nil {
		t.Fatalf("no etcdserverpb.KV/Put span among %d", len(rec.Ended()))
	}
	if put.Parent().SpanID() != parent.SpanContext().SpanID() || put.SpanKind() != trace.SpanKindClient {
		t.Fatalf("Put span: parent %s kind %s, want a client span under %s", put.Parent().SpanID(), put.SpanKind(), parent.SpanContext().SpanID())
	}
}
