package otlpreceiver

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened for assertions.
type Span struct {
	Protocol string // "http/protobuf" or "grpc": how it came
	// Resource holds the resource's attributes (service.name, ...).
	Resource map[string]string
	Scope    string // the instrumentation scope's name
	Name     string
	// TraceID, SpanID and ParentSpanID are in lower-case hex, as in a
	// traceparent header; ParentSpanID is "" for a root span.
	TraceID, SpanID, ParentSpanID string
	Kind                          string // "SPAN_KIND_SERVER", ...
	Attributes                    map[string]string
	Error                         bool // status code ERROR
}

// Receiver collects the spans exported to it until the test ends.
type Receiver struct {
	// HTTPURL is the OTLP/HTTP base URL (http://127.0.0.1:port), for
	// OTEL_EXPORTER_OTLP_ENDPOINT with protocol http/protobuf.
	HTTPURL string
	// GRPCAddr is the OTLP/gRPC address (127.0.0.1:port); its endpoint
	// is "http://" + GRPCAddr.
	GRPCAddr string

	mu      sync.Mutex
	spans   []Span
	headers []http.Header // of each export, gRPC metadata included
}

// Start starts both listeners on loopback; they stop at t's cleanup.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	hs := httptest.NewServer(http.HandlerFunc(r.serveHTTP))
	t.Cleanup(hs.Close)
	r.HTTPURL = hs.URL
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("otlpreceiver: %v", err)
	}
	gs := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(gs, grpcService{r: r})
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	r.GRPCAddr = ln.Addr().String()
	return r
}

// Spans returns a copy of what was received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Headers returns the request headers of each export so far (for gRPC,
// the call's metadata).
func (r *Receiver) Headers() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.headers...)
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "otlpreceiver: only POST /v1/traces", http.StatusNotFound)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "otlpreceiver: content type "+ct+" is not application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, "otlpreceiver: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.add("http/protobuf", req.Header.Clone(), &msg)
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

type grpcService struct {
	collectorpb.UnimplementedTraceServiceServer
	r *Receiver
}

func (g grpcService) Export(ctx context.Context, msg *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := http.Header{}
	for k, vs := range md {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	g.r.add("grpc", h, msg)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) add(protocol string, h http.Header, msg *collectorpb.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range msg.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Protocol: protocol, Resource: res, Scope: ss.GetScope().GetName(), Name: s.GetName(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Kind: s.GetKind().String(), Attributes: attrs(s.GetAttributes()),
					Error: s.GetStatus().GetCode().String() == "STATUS_CODE_ERROR",
				}
				if len(s.GetParentSpanId()) > 0 {
					sp.ParentSpanID = hex.EncodeToString(s.GetParentSpanId())
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, got...)
	r.headers = append(r.headers, h)
}

// attrs flattens attributes to strings: enough to compare.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = fmt.Sprint(anyValue(kv.GetValue()))
	}
	return m
}

func anyValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	}
	return v.String()
}
