package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/internal/otlpreceiver"
)

// traceEnv are the variables InitTracing and the SDK read: each case
// starts from none of them (t.Setenv restores them after the test).
var traceEnv = []string{
	envSDKDisabled, envTracesExporter, envEndpoint, envTracesEndpoint, envProtocol, envTracesProtocol,
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_INSECURE",
}

// initTracingFor runs InitTracing with env (on top of no tracing
// variables), starts a root span named name and shuts tracing down, which
// exports it. It restores the global provider and propagator.
func initTracingFor(t *testing.T, env map[string]string, name string, opts ...TracingOption) error {
	t.Helper()
	for _, k := range traceEnv {
		t.Setenv(k, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shutdown, err := InitTracing(ctx, "", opts...)
	if err != nil {
		return err
	}
	_, span := otel.Tracer("test").Start(ctx, name)
	span.End()
	return shutdown(ctx)
}

func TestInitTracingProtocols(t *testing.T) {
	rcv := otlpreceiver.Start(t)
	cases := []struct {
		name, protocol string
		env            map[string]string
		opts           []TracingOption
	}{
		{"endpoint only: http/protobuf, the spec's default", "http/protobuf",
			map[string]string{envEndpoint: rcv.HTTPURL}, nil},
		{"grpc", "grpc",
			map[string]string{envEndpoint: "http://" + rcv.GRPCAddr, envProtocol: "grpc"}, nil},
		{"traces-specific variables win", "grpc",
			map[string]string{envEndpoint: "http://127.0.0.1:1", envProtocol: "http/protobuf",
				envTracesEndpoint: "http://" + rcv.GRPCAddr, envTracesProtocol: "grpc"}, nil},
		{"legacy key: OTLP/gRPC", "grpc", nil,
			[]TracingOption{WithTracingConfig(TracingConfig{OTLPEndpoint: rcv.GRPCAddr, Insecure: true})}},
		{"headers", "http/protobuf",
			map[string]string{envEndpoint: rcv.HTTPURL, "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=acme"}, nil},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "span-" + string(rune('a'+i))
			if err := initTracingFor(t, tc.env, name, tc.opts...); err != nil {
				t.Fatal(err)
			}
			var got *otlpreceiver.Span
			for _, s := range rcv.Spans() {
				if s.Name == name {
					got = &s
				}
			}
			if got == nil || got.Protocol != tc.protocol {
				t.Fatalf("span %s: %+v, want it received over %s", name, got, tc.protocol)
			}
			if got.Resource["service.name"] != DefaultServiceName {
				t.Errorf("service.name %q, want %q", got.Resource["service.name"], DefaultServiceName)
			}
		})
	}
	var tenant bool
	for _, h := range rcv.Headers() {
		tenant = tenant || h.Get("x-tenant") == "acme"
	}
	if !tenant {
		t.Error("OTEL_EXPORTER_OTLP_HEADERS: no export carried x-tenant")
	}
}

func TestInitTracingResourceAndSampler(t *testing.T) {
	rcv := otlpreceiver.Start(t)
	env := map[string]string{envEndpoint: rcv.HTTPURL, "OTEL_SERVICE_NAME": "billing",
		"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=prod,service.instance.id=pod-7"}
	if err := initTracingFor(t, env, "resource", WithServiceInstanceID("runner-1")); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Spans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	res := spans[0].Resource
	if res["service.name"] != "billing" || res["deployment.environment.name"] != "prod" ||
		res["service.instance.id"] != "pod-7" || res["service.version"] != Version {
		t.Errorf("resource %v: want service.name billing, the environment's attributes over the defaults, service.version %s", res, Version)
	}

	// The SDK reads the sampler: always_off records nothing.
	env["OTEL_TRACES_SAMPLER"] = "always_off"
	if err := initTracingFor(t, env, "sampled-out"); err != nil {
		t.Fatal(err)
	}
	if n := len(rcv.Spans()); n != 1 {
		t.Errorf("OTEL_TRACES_SAMPLER=always_off: %d spans received, want still 1", n)
	}
}

func TestInitTracingOff(t *testing.T) {
	rcv := otlpreceiver.Start(t)
	noop := otel.GetTracerProvider()
	for name, env := range map[string]map[string]string{
		"no endpoint":   {},
		"disabled":      {envEndpoint: rcv.HTTPURL, envSDKDisabled: "true"},
		"exporter none": {envEndpoint: rcv.HTTPURL, envTracesExporter: "none"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := initTracingFor(t, env, name); err != nil {
				t.Fatal(err)
			}
			if otel.GetTracerProvider() != noop {
				t.Error("a tracer provider was set")
			}
			// The propagator is set all the same: traces pass through.
			ctx := propagation.TraceContext{}.Extract(context.Background(),
				propagation.MapCarrier{"traceparent": "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"})
			out := propagation.MapCarrier{}
			otel.GetTextMapPropagator().Inject(ctx, out)
			if out["traceparent"] == "" {
				t.Error("no traceparent propagated")
			}
		})
	}
	if n := len(rcv.Spans()); n != 0 {
		t.Errorf("%d spans exported with tracing off", n)
	}
}

func TestInitTracingConsoleAndErrors(t *testing.T) {
	var buf bytes.Buffer
	if err := initTracingFor(t, map[string]string{envTracesExporter: "console"}, "to-console", withConsoleWriter(&buf)); err != nil {
		t.Fatal(err)
	}
	var line struct {
		Name    string `json:"name"`
		TraceID string `json:"trace_id"`
		Service string `json:"service.name"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line.Name != "to-console" || len(line.TraceID) != 32 || line.Service != DefaultServiceName {
		t.Errorf("console output %q (%v): want one JSON span named to-console", buf.String(), err)
	}
	for env, want := range map[string]string{envTracesExporter: "zipkin", envProtocol: "http/json"} {
		err := initTracingFor(t, map[string]string{env: want, envEndpoint: "http://127.0.0.1:1"}, "bad")
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), env) {
			t.Errorf("%s=%s: %v, want ErrInvalidConfig naming the variable", env, want, err)
		}
	}
}

func TestTraceHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewTraceHandler(slog.NewJSONHandler(&buf, nil))).With("runner", "r1")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab}, SpanID: trace.SpanID{0xcd}, TraceFlags: trace.FlagsSampled})
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "traced")
	log.InfoContext(context.Background(), "untraced")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	var traced, untraced map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &traced); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &untraced); err != nil {
		t.Fatal(err)
	}
	if traced[LogKeyTraceID] != sc.TraceID().String() || traced[LogKeySpanID] != sc.SpanID().String() || traced["runner"] != "r1" {
		t.Errorf("traced record %v: want trace_id %s, span_id %s and the logger's attributes", traced, sc.TraceID(), sc.SpanID())
	}
	if _, ok := untraced[LogKeyTraceID]; ok {
		t.Errorf("untraced record %v has a trace_id", untraced)
	}
}
