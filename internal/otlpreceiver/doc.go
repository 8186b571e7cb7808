// Package otlpreceiver is an in-process OTLP trace receiver for tests: it
// accepts OTLP/HTTP (POST /v1/traces, protobuf) and OTLP/gRPC exports, as
// a collector would, and keeps the spans for assertions. Tests point
// OTEL_EXPORTER_OTLP_ENDPOINT at it, in-process or in a child process's
// environment.
package otlpreceiver
