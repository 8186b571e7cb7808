package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/external"
	"github.com/tenurehq/tenure/runner"
)

const runLong = `Runs a runner process: it joins the cluster of its config, owns its share
of the shards and executes their tasks with the built-in handlers (echo,
sleep, counter) and those given with --handler. SIGTERM or Ctrl-C stops it
gracefully (its shards are handed over, then its lease revoked; exit 0); a
second signal exits at once.

Once the runner has connected to its cluster, one line on stdout says
where it listens (with -o json, one JSON object: event "ready", runner_id,
cluster, admin_addr, advertise_addr, call_addr, config, version); logs go
to stderr.

Configuration comes from the config file (--config, else $TENURE_CONFIG,
else ./.tenure-dev/tenure.yaml), TENURE_* environment variables and flags, flags
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
`

// runFlags are the flags of `tenure run`.
type runFlags struct {
	id, admin, callAddr, weight string
	sets, handlers, singletons  []string
}

func newRunCmd(cli *CLI) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "run a runner process",
		Long:  runLong + "\nconfig keys: " + strings.Join(runner.Keys(), ", "),
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), cli, f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.id, "runner-id", "", "runner id (default: config runner_id, else the host name)")
	fs.StringVar(&f.admin, "admin-addr", "", "admin HTTP address (default: config admin_addr)")
	fs.StringVar(&f.callAddr, "call-addr", "", "entity call (gRPC) address (default: config call.addr, loopback on any free port)")
	fs.StringVar(&f.weight, "weight", "", "assignment weight (0 drains)")
	fs.StringArrayVar(&f.handlers, "handler", nil, "task handler TYPE=http:URL or TYPE=exec:COMMAND (repeatable)")
	fs.StringArrayVar(&f.singletons, "singleton", nil, "singleton TYPE=http:URL or TYPE=exec:COMMAND (repeatable)")
	fs.StringArrayVar(&f.sets, "set", nil, "config key=value (repeatable)")
	return cmd
}

// run runs `tenure run`.
func run(ctx context.Context, cli *CLI, f runFlags) error {
	overrides := slices.Clone(f.sets)
	if f.id != "" {
		overrides = append(overrides, "runner_id="+f.id)
	}
	if f.admin != "" {
		// advertise_addr follows it, derived by the runner when it listens
		// on every interface (an unspecified address is never advertised).
		overrides = append(overrides, "admin_addr="+f.admin, "advertise_addr=")
	}
	if f.callAddr != "" {
		overrides = append(overrides, "call.addr="+f.callAddr)
	}
	if f.weight != "" {
		if _, err := strconv.ParseFloat(f.weight, 64); err != nil {
			return usagef("--weight %q is not a number", f.weight)
		}
		overrides = append(overrides, "weight="+f.weight)
	}
	cfg, err := cli.loadConfig(overrides)
	if err != nil {
		return err
	}
	cfg.Handlers = append(cfg.Handlers, f.handlers...)
	cfg.Singletons = append(cfg.Singletons, f.singletons...)
	if err := cfg.Validate(); err != nil {
		return err
	}
	path, _, _ := cli.configSource()
	return runRunner(ctx, cli, cfg, path)
}

// RunReady is the line `tenure run` prints on stdout once its runner has
// connected to the cluster (JSON with -o json): where to reach it.
type RunReady struct {
	Event    string `json:"event"` // "ready"
	RunnerID string `json:"runner_id"`
	Cluster  string `json:"cluster"`
	// The addresses are "" when the admin API is disabled (admin_addr ""):
	// the runner reports them only through it.
	AdminAddr string `json:"admin_addr"` // where its admin server listens
	Advertise string `json:"advertise_addr"`
	CallAddr  string `json:"call_addr"`
	Config    string `json:"config"` // the config file ("" when none)
	Version   string `json:"version"`
}

// runRunner runs one runner until the first signal, then stops it
// gracefully; a second signal exits at once.
func runRunner(ctx context.Context, cli *CLI, cfg runner.Config, cfgPath string) error {
	defer startRunnerTracing(ctx, cli, cfg)()
	r, err := runner.New(cfg, runner.WithTypes(standardTypes(cfg.Handlers, cfg.Singletons, cfg.RunnerID)))
	if err != nil {
		return err
	}
	ctx, stop := signalContext(ctx, cli)
	defer stop()
	go func() {
		if waitReady(ctx, r, cfg.AdminAddr != "") != nil {
			return
		}
		rd := RunReady{Event: "ready", RunnerID: cfg.RunnerID, Cluster: cfg.Cluster, Config: cfgPath, Version: runner.Version}
		if cfg.AdminAddr != "" {
			st := r.Status()
			rd.AdminAddr, rd.Advertise, rd.CallAddr = r.AdminAddr(), st.Addr, st.CallAddr
		}
		cli.printReady(rd, func() string {
			return fmt.Sprintf("tenure run: runner %s of cluster %q ready: admin %s, calls %s",
				rd.RunnerID, rd.Cluster, orDash(rd.AdminAddr), orDash(rd.CallAddr))
		})
	}()
	return r.Run(ctx)
}

// readyPoll is how often waitReady looks at a connected runner.
const readyPoll = 20 * time.Millisecond

// waitReady waits until r has connected to its cluster (what
// Runner.Client waits for), then, when it serves the admin API, until that
// listens and r has registered (which it does once its call and admin
// servers listen), so that the addresses printed answer. Status is read
// only once the admin server listens: from then on the admin handler
// reads it concurrently too, while before that Run is still setting up
// what it reports. It gives up when ctx ends (the caller cancels it when
// Run returns).
func waitReady(ctx context.Context, r *runner.Runner, adminEnabled bool) error {
	c, err := r.Client(ctx)
	if err != nil {
		return err
	}
	c.Close()
	if !adminEnabled {
		return nil
	}
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for r.AdminAddr() == "" || !r.Status().Registered {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// printReady prints the readiness of run or dev on stdout: v as one JSON
// line with -o json, else the text line.
func (c *CLI) printReady(v any, text func() string) {
	if c.output == "json" {
		writeJSONLine(c.Stdout, v)
		return
	}
	fmt.Fprintln(c.Stdout, text())
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
