package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// Tracing follows OpenTelemetry's own configuration: the standard OTEL_*
// environment variables, read by InitTracing and by the SDK and exporters
// it builds, with no Tenure key needed. The tracing.* config keys are the
// deprecated way, kept working (WithTracingConfig).

// Standard variables InitTracing reads itself; the exporters and the SDK
// read the others (endpoints, headers, timeouts, TLS, OTEL_TRACES_SAMPLER,
// OTEL_BSP_*, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES).
const (
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// OTLP protocols (OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL).
const (
	protocolGRPC = "grpc"
	protocolHTTP = "http/protobuf" // the specification's default
)

// DefaultServiceName is the service.name of InitTracing's resource when
// neither its caller nor OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES
// name one.
const DefaultServiceName = "tenure"

// TracingOption adjusts InitTracing.
type TracingOption func(*tracingOptions)

type tracingOptions struct {
	legacy   TracingConfig
	instance string
	console  io.Writer
}

// WithTracingConfig applies the deprecated tracing.otlp_endpoint and
// tracing.insecure keys: OTLP/gRPC to that host:port (plain when
// insecure), unless OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT names an endpoint,
// which wins.
func WithTracingConfig(c TracingConfig) TracingOption {
	return func(o *tracingOptions) { o.legacy = c }
}

// WithServiceInstanceID sets the resource's service.instance.id (a
// runner's id); OTEL_RESOURCE_ATTRIBUTES may override it.
func WithServiceInstanceID(id string) TracingOption {
	return func(o *tracingOptions) { o.instance = id }
}

// withConsoleWriter sends the console exporter's lines to w instead of
// stderr (tests).
func withConsoleWriter(w io.Writer) TracingOption {
	return func(o *tracingOptions) { o.console = w }
}

// InitTracing configures the process's global tracer provider and
// propagator (otel.SetTracerProvider, otel.SetTextMapPropagator) from the
// standard OTEL_* variables, for `tenure run`, `tenure dev`, the CLI, or a
// service embedding Tenure that has no provider of its own:
//
//   - the propagator is W3C trace context and baggage, always, so that a
//     trace passes through even when this process exports nothing;
//   - OTEL_SDK_DISABLED=true: nothing more;
//   - OTEL_TRACES_EXPORTER: otlp, console (one JSON line per span on
//     stderr: stdout is the CLI's), none, or a comma-separated list;
//     unset means otlp when an OTLP endpoint is configured
//     (OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, or the deprecated
//     tracing.otlp_endpoint, see WithTracingConfig) and none otherwise, so
//     that a process nobody pointed at a collector does not try
//     localhost:4318 forever;
//   - OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL: http/protobuf (the default) or
//     grpc; the exporters read the endpoint, headers, timeout, TLS and
//     compression variables themselves;
//   - the resource: service.name service (DefaultServiceName if empty),
//     service.version Version, then OTEL_SERVICE_NAME and
//     OTEL_RESOURCE_ATTRIBUTES, which win;
//   - the SDK reads OTEL_TRACES_SAMPLER[_ARG] and OTEL_BSP_*.
//
// With no exporter the global provider is left as it is (no-op unless set
// elsewhere). shutdown flushes the spans not yet exported and stops the
// exporters: call it before the process exits. An invalid variable is an
// error wrapping ErrInvalidConfig that names it; the propagator is set
// even then.
func InitTracing(ctx context.Context, service string, opts ...TracingOption) (shutdown func(context.Context) error, err error) {
	o := tracingOptions{console: os.Stderr}
	for _, opt := range opts {
		opt(&o)
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	none := func(context.Context) error { return nil }
	if strings.EqualFold(strings.TrimSpace(os.Getenv(envSDKDisabled)), "true") {
		return none, nil
	}
	exporters, err := tracesExporters(ctx, o)
	if err != nil || len(exporters) == 0 {
		return none, err
	}
	res, err := tracingResource(ctx, service, o.instance)
	if err != nil {
		return none, err
	}
	popts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	for _, exp := range exporters {
		popts = append(popts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(popts...)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// tracesExporters builds the exporters OTEL_TRACES_EXPORTER names.
func tracesExporters(ctx context.Context, o tracingOptions) ([]sdktrace.SpanExporter, error) {
	names := strings.TrimSpace(os.Getenv(envTracesExporter))
	if names == "" {
		if os.Getenv(envTracesEndpoint) == "" && os.Getenv(envEndpoint) == "" && o.legacy.OTLPEndpoint == "" {
			return nil, nil
		}
		names = "otlp"
	}
	var exps []sdktrace.SpanExporter
	for name := range strings.SplitSeq(names, ",") {
		switch strings.TrimSpace(name) {
		case "none":
			return nil, nil
		case "otlp":
			exp, err := otlpExporter(ctx, o.legacy)
			if err != nil {
				return nil, err
			}
			exps = append(exps, exp)
		case "console":
			exps = append(exps, newConsoleExporter(o.console))
		default:
			return nil, fmt.Errorf("%w: %s=%q: %q is not otlp, console or none", ErrInvalidConfig, envTracesExporter, names, name)
		}
	}
	return exps, nil
}

// otlpExporter is the OTLP exporter of the configured protocol. The
// deprecated key is OTLP/gRPC to host:port, as it always was, whatever
// the protocol variables say.
func otlpExporter(ctx context.Context, legacy TracingConfig) (sdktrace.SpanExporter, error) {
	if legacy.OTLPEndpoint != "" && os.Getenv(envTracesEndpoint) == "" && os.Getenv(envEndpoint) == "" {
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(legacy.OTLPEndpoint)}
		if legacy.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		return checkExporter(otlptracegrpc.New(ctx, opts...))
	}
	protocol, from := os.Getenv(envTracesProtocol), envTracesProtocol
	if protocol == "" {
		protocol, from = os.Getenv(envProtocol), envProtocol
	}
	switch protocol {
	case protocolGRPC:
		return checkExporter(otlptracegrpc.New(ctx))
	case protocolHTTP, "":
		return checkExporter(otlptracehttp.New(ctx))
	}
	return nil, fmt.Errorf("%w: %s=%q: the protocol is grpc or http/protobuf", ErrInvalidConfig, from, protocol)
}

// checkExporter wraps an exporter's construction error.
func checkExporter[E sdktrace.SpanExporter](exp E, err error) (sdktrace.SpanExporter, error) {
	if err != nil {
		return nil, fmt.Errorf("%w: OTLP exporter: %w", ErrInvalidConfig, err)
	}
	return exp, nil
}

// tracingResource is the resource of the process's spans: the defaults,
// then what the environment says (later detectors win).
func tracingResource(ctx context.Context, service, instance string) (*resource.Resource, error) {
	if service == "" {
		service = DefaultServiceName
	}
	defaults := []resource.Option{resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(Version))}
	if instance != "" {
		defaults = append(defaults, resource.WithAttributes(semconv.ServiceInstanceID(instance)))
	}
	res, err := resource.New(ctx, append(defaults, resource.WithTelemetrySDK(), resource.WithFromEnv())...)
	if errors.Is(err, resource.ErrPartialResource) {
		// A malformed OTEL_RESOURCE_ATTRIBUTES entry: the others apply,
		// and the SDK's error handler reports it, as the spec asks.
		otel.Handle(err)
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: tracing resource: %w", ErrInvalidConfig, err)
	}
	return res, nil
}
