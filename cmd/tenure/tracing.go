package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/runner"
)

// tracingShutdownTimeout bounds the flush of the spans not yet exported
// when a command ends.
const tracingShutdownTimeout = 5 * time.Second

// startTracing configures OpenTelemetry for a command that talks to a
// cluster (task, call, dev) from the standard OTEL_* variables (see
// runner.InitTracing), and the deprecated tracing.* keys of the config
// when there is one. A tracing problem is a warning: the command runs
// anyway. The returned func flushes the spans; defer it.
func startTracing(ctx context.Context, cli *CLI) func() {
	var opts []runner.TracingOption
	if cfg, err := cli.loadConfig(nil); err == nil {
		opts = append(opts, runner.WithTracingConfig(cfg.Tracing))
	}
	return initTracing(ctx, cli, "tenure-cli", opts...)
}

// startRunnerTracing is startTracing for `tenure run`: its runner's config
// and id (service.instance.id).
func startRunnerTracing(ctx context.Context, cli *CLI, cfg runner.Config) func() {
	return initTracing(ctx, cli, runner.DefaultServiceName,
		runner.WithTracingConfig(cfg.Tracing), runner.WithServiceInstanceID(cfg.RunnerID))
}

// initTracing is runner.InitTracing for a command: a failure is a warning
// on stderr, and the returned func flushes the spans within a bound.
func initTracing(ctx context.Context, cli *CLI, service string, opts ...runner.TracingOption) func() {
	shutdown, err := runner.InitTracing(ctx, service, opts...)
	if err != nil {
		fmt.Fprintf(cli.Stderr, "tenure: tracing off: %v\n", oneLine(err))
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			fmt.Fprintf(cli.Stderr, "tenure: flushing spans: %v\n", oneLine(err))
		}
	}
}
