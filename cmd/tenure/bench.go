package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/tenurehq/tenure/internal/bench"
)

const benchUsage = `usage: tenure bench <scenario>... | all [--json] [--trials N] [--data DIR] [--quick]

Runs benchmark scenarios on loopback: it starts an embedded etcd and an
embedded S3 server (VersityGW) itself, then runners in this process or as
child processes of this binary, with a 3s lease TTL. ` + "`bench all`" + ` takes three to
four minutes on two cores; --quick runs a smoke version in under a minute.
See BENCHMARKS.md for what each scenario measures.

scenarios:
  failover    SIGKILL 1 of 3 runner processes: time until its shards are re-owned
  handoff     SIGTERM 1 of 3 runner processes: time until its shards are re-owned
  detach      partition a runner from etcd: detach time relative to deadline − margin
  throughput  no-op tasks/s with 1 and 3 runners
  latency     submit → handler start, p50 and p99
  s3cost      S3 requests per task and idle per minute; monthly cost estimate
  assign      compute time of the shard assignment by shards × runners
  call        entity calls/s and latency, remote and local, by callers (1, 16, 64);
              errors and unavailability under a SIGTERM and a SIGKILL of a runner
  state       durable entity state (the built-in counter): cold, warm and post-handoff
              activation and save latency, S3 requests per activation and per save

flags:
`

// Bench runs `tenure bench`.
func Bench(ctx context.Context, cli *CLI, args []string) error {
	return runBench(ctx, cli, args, bench.Options{})
}

// runBench runs the bench with base's Executable and Infra (tests point
// them at a built binary and at shared servers) and the options of args.
func runBench(ctx context.Context, cli *CLI, args []string, base bench.Options) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(cli.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object with every figure instead of a table")
	trials := fs.Int("trials", 0, fmt.Sprintf("trials per scenario (default %d, %d with --quick)", bench.DefaultTrials, bench.QuickTrials))
	data := fs.String("data", "", "directory for the servers' data and the logs, kept (default: a temporary one, removed after a successful run)")
	quick := fs.Bool("quick", false, "a fast smoke run: fewer tasks, a 5s idle window, smaller assignments, short call windows")
	fs.Usage = func() {
		fmt.Fprint(cli.Stderr, benchUsage)
		fs.PrintDefaults()
	}
	// Scenarios come first and flags after them (or mixed): parse flags
	// between the positional arguments.
	var scenarios []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		scenarios = append(scenarios, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(scenarios) == 0 {
		fs.Usage()
		return fmt.Errorf("bench: no scenario given (%s, or all)", strings.Join(bench.Names(), ", "))
	}
	if *trials < 0 || *trials > bench.MaxTrials {
		return fmt.Errorf("bench: --trials %d: must be in [1, %d]", *trials, bench.MaxTrials)
	}
	o := base
	o.Scenarios, o.Trials, o.Quick, o.DataDir = scenarios, *trials, *quick, *data
	o.Progress, o.Version = cli.Stderr, cli.Version
	if err := o.Validate(); err != nil {
		return err
	}
	ctx, stop := signalContext(ctx, cli)
	defer stop()
	rep, err := bench.Run(ctx, o)
	if rep != nil && (err == nil || len(rep.Scenarios) > 0) {
		var werr error
		if *asJSON {
			werr = rep.WriteJSON(cli.Stdout)
		} else {
			werr = rep.WriteTable(cli.Stdout)
		}
		if err == nil {
			err = werr
		}
	}
	return err
}
