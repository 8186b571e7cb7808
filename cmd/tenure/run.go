package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/external"
	"github.com/tenurehq/tenure/runner"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

const runUsage = `usage: tenure run [flags]

Runs a runner process: it joins the cluster of its config, owns its share
of the shards and executes their tasks with the built-in handlers (echo,
sleep, counter) and those given with --handler. SIGTERM or Ctrl-C stops it
gracefully (its shards are handed over, then its lease revoked; exit 0); a
second signal exits at once.

Configuration comes from the config file (--config; default
./.tenure-dev/tenure.yaml), TENURE_* environment variables and flags, flags
winning. Any key can be set with --set key=value (see the keys below); its
variable is the key in upper case with "_" for "." (TENURE_ETCD_ENDPOINTS).
A TENURE_* variable that names no key (TENURE_PORT, which a Kubernetes
Service named "tenure" injects) is ignored with one logged warning; the
TENURE_TASK_* variables an exec: handler gets are ignored silently, so the
handler can run tenure commands itself (with --config: the runner's own
TENURE_* configuration is not passed on to it).

etcd TLS: https:// endpoints use TLS, with the system roots unless
etcd.ca_file is set. TLS settings (etcd.ca_file, cert_file, key_file,
server_name) with an http:// endpoint are refused: etcd's client would
speak plain text to it.

S3 region: s3.region when set; else, as the AWS SDK resolves it,
AWS_REGION, then AWS_DEFAULT_REGION, then the region of the AWS_PROFILE
profile (else "default") in AWS_CONFIG_FILE (else ~/.aws/config); else
us-east-1. The runner logs the region it signs for (s3_region) when it
starts.

Handlers: --handler TYPE=http:URL posts each task as JSON to URL (2xx done,
4xx permanent failure, 5xx/timeout retry); --handler TYPE=exec:COMMAND runs
COMMAND with the task input on stdin (exit 0 done, 75 retry, other
permanent). The built-in counter keeps a durable total per entity id
({"add": N} adds, {} reads; both reply {"total": T}).

Singletons: --singleton TYPE=http:URL or TYPE=exec:COMMAND (or the
singletons key) declares a singleton type: exactly one instance runs in the
cluster, on the owner of its shard, restarted on the successor when the
shard moves.

flags:
`

// Run runs `tenure run`.
func Run(ctx context.Context, cli *CLI, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(cli.Stderr)
	var sets, handlers, singletons listFlag
	id := fs.String("runner-id", "", "runner id (default: config runner_id, else the host name)")
	admin := fs.String("admin-addr", "", "admin HTTP address (default: config admin_addr)")
	callAddr := fs.String("call-addr", "", "entity call (gRPC) address (default: config call.addr, loopback on any free port)")
	weight := fs.String("weight", "", "assignment weight (0 drains)")
	fs.Var(&handlers, "handler", "task handler TYPE=http:URL or TYPE=exec:COMMAND (repeatable)")
	fs.Var(&singletons, "singleton", "singleton TYPE=http:URL or TYPE=exec:COMMAND (repeatable)")
	fs.Var(&sets, "set", "config key=value (repeatable)")
	fs.Usage = func() {
		fmt.Fprint(cli.Stderr, runUsage)
		fs.PrintDefaults()
		fmt.Fprintf(cli.Stderr, "\nconfig keys: %s\n", strings.Join(runner.Keys(), ", "))
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("run: unexpected argument %q", fs.Arg(0))
	}
	overrides := []string(sets)
	if *id != "" {
		overrides = append(overrides, "runner_id="+*id)
	}
	if *admin != "" {
		// advertise_addr follows it, derived by the runner when it listens
		// on every interface (an unspecified address is never advertised).
		overrides = append(overrides, "admin_addr="+*admin, "advertise_addr=")
	}
	if *callAddr != "" {
		overrides = append(overrides, "call.addr="+*callAddr)
	}
	if *weight != "" {
		if _, err := strconv.ParseFloat(*weight, 64); err != nil {
			return fmt.Errorf("run: --weight %q is not a number", *weight)
		}
		overrides = append(overrides, "weight="+*weight)
	}
	cfg, err := cli.loadConfig(overrides)
	if err != nil {
		return err
	}
	cfg.Handlers = append(cfg.Handlers, handlers...)
	cfg.Singletons = append(cfg.Singletons, singletons...)
	if err := cfg.Validate(); err != nil {
		return err
	}
	return runRunner(ctx, cli, cfg)
}

// runRunner runs one runner until the first signal, then stops it
// gracefully; a second signal exits at once.
func runRunner(ctx context.Context, cli *CLI, cfg runner.Config) error {
	defer startRunnerTracing(ctx, cli, cfg)()
	r, err := runner.New(cfg, runner.WithTypes(standardTypes(cfg.Handlers, cfg.Singletons, cfg.RunnerID)))
	if err != nil {
		return err
	}
	ctx, stop := signalContext(ctx, cli)
	defer stop()
	return r.Run(ctx)
}

// standardTypes registers the built-in and configured handlers and
// singletons (an http: singleton names runnerID in its request).
func standardTypes(handlers, singletons []string, runnerID string) func(*entity.Host) error {
	return func(h *entity.Host) error {
		if err := runner.RegisterBuiltins(h); err != nil {
			return err
		}
		if err := external.RegisterHandlers(h, handlers); err != nil {
			return err
		}
		return external.RegisterSingletonsWith(h, singletons, external.WithRunnerID(runnerID))
	}
}

// signalContext is cancelled by the first SIGINT or SIGTERM; a second one
// exits the process at once.
func signalContext(parent context.Context, cli *CLI) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(cli.Stderr, "tenure: %s: stopping gracefully (again to exit at once)\n", s)
			cancel()
		case <-ctx.Done():
			return
		}
		if s, ok := <-sigs; ok {
			fmt.Fprintf(cli.Stderr, "tenure: %s: exiting now\n", s)
			os.Exit(1)
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel()
	}
}
