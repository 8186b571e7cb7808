package s3

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/internal/testenv"
)

// TestClientSpans: NewClient's client records a client span per operation
// made under a span, with the AWS SDK conventions, and none for a call
// made under no span (a background LIST).
func TestClientSpans(t *testing.T) {
	gw := testenv.SharedS3(t)
	bucket := gw.Bucket(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	cc := DefaultClientConfig()
	cc.Endpoint, cc.Region, cc.UsePathStyle = gw.Endpoint(), gw.Region(), true
	cc.AccessKey, cc.SecretKey = testenv.S3AccessKey, testenv.S3SecretKey
	cc.TracerProvider = tp
	client, err := NewClient(context.Background(), cc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := New(client, bucket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := st.Put(ctx, "background", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("a call under no span recorded %d spans", n)
	}

	pctx, parent := tp.Tracer("test").Start(ctx, "operation")
	if _, err := st.Put(pctx, "traced", []byte("x")); err != nil {
		t.Fatal(err)
	}
	_, _ = st.Get(pctx, "missing") // a 404: an error span
	parent.End()

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
	}
	put, get := byName["S3.PutObject"], byName["S3.GetObject"]
	if put == nil || get == nil {
		t.Fatalf("spans %v: want S3.PutObject and S3.GetObject", keys(byName))
	}
	for _, s := range []sdktrace.ReadOnlySpan{put, get} {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s: parent %s kind %s, want a client span under %s", s.Name(), s.Parent().SpanID(), s.SpanKind(), parent.SpanContext().SpanID())
		}
	}
	attrs := attribute.NewSet(put.Attributes()...)
	for k, want := range map[attribute.Key]string{"rpc.system.name": "aws-api", "rpc.method": "S3/PutObject", "aws.region": gw.Region()} {
		if v, _ := attrs.Value(k); v.AsString() != want {
			t.Errorf("PutObject %s = %q, want %q", k, v.AsString(), want)
		}
	}
	if v, _ := attrs.Value("http.response.status_code"); v.AsInt64() != 200 {
		t.Errorf("PutObject status code %v, want 200", v)
	}
	if get.Status().Code.String() != "Error" {
		t.Errorf("GetObject of a missing key: status %v, want Error", get.Status())
	}
	getAttrs := attribute.NewSet(get.Attributes()...)
	if v, _ := getAttrs.Value("http.response.status_code"); v.AsInt64() != 404 {
		t.Errorf("GetObject status code %v, want 404", v)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
