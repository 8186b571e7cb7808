//go:build !release

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/internal/bench"
)

const benchLong = `Runs benchmark scenarios on loopback: it starts an embedded etcd and an
embedded S3 server (VersityGW) itself, then runners in this process or as
child processes of this binary, with a 3s lease TTL (scale: the default
10s). ` + "`bench all`" + ` takes four to five minutes on two cores, plus two to three
for scale; --quick runs a smoke version in about a minute.
See BENCHMARKS.md for what each scenario measures. -o json prints one JSON
object with every figure instead of a table.

scenarios:
  failover    SIGKILL 1 of 3 runner processes: time until its shards are re-owned
  handoff     SIGTERM 1 of 3 runner processes: time until its shards are re-owned
  detach      partition a runner from etcd: detach time relative to deadline − margin
  throughput  no-op tasks/s with 1 and 3 runners, and as a ratio of the S3 server's own
              rate for the same requests (its ceiling), measured in the same run
  latency     submit → handler start, p50 and p99
  latency-profile
              with a simulated S3 round trip (20ms and 5ms, or --s3-latency): submit → start,
              tasks/s of one runner, one entity's FIFO rate, each in round trips
  s3cost      S3 requests per task and idle per minute; monthly cost estimate
  assign      compute time of the shard assignment by shards × runners
  call        entity calls/s and latency, remote and local, by callers (1, 16, 64);
              errors and unavailability under a SIGTERM and a SIGKILL of a runner
  state       durable entity state (the built-in counter): cold, warm and post-handoff
              activation and save latency, S3 requests per activation and per save
  scale       N runner processes (--runners) over --shards shards: cold start to a balanced
              assignment, SIGTERM and SIGKILL of one runner until its shards are re-owned,
              idle etcd and S3 requests/s
`

// benchOptions is what CLI.benchBase holds: the base of `tenure bench`'s
// options, a type of its own so that the release build, which has no
// bench, can make it empty.
type benchOptions = bench.Options

func newBenchCmd(cli *CLI) *cobra.Command {
	var (
		trials       int
		data         string
		quick        bool
		s3lat        string
		coordination string
		scaleN       []int
		shards       int
	)
	cmd := &cobra.Command{
		Use:   "bench SCENARIO... | all",
		Short: "run benchmark scenarios on a local cluster",
		Long:  benchLong,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("no scenario given (%s, or all)", strings.Join(bench.Names(), ", "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if trials < 0 || trials > bench.MaxTrials {
				return usagef("--trials %d: must be in [1, %d]", trials, bench.MaxTrials)
			}
			o := cli.benchBase
			if s3lat != "" {
				l, err := bench.ParseS3Latency(s3lat)
				if err != nil {
					return usagef("--s3-latency: %w", err)
				}
				o.S3Latency = &l
			}
			for _, n := range scaleN {
				if n < 2 || n > bench.MaxScaleRunners {
					return usagef("--runners %d: each must be in [2, %d]", n, bench.MaxScaleRunners)
				}
			}
			if shards < 0 || shards > bench.MaxScaleShards {
				return usagef("--shards %d: must be in [1, %d]", shards, bench.MaxScaleShards)
			}
			o.ScaleRunners, o.ScaleShards = scaleN, shards
			o.Coordination = coordination
			o.Scenarios, o.Trials, o.Quick, o.DataDir = args, trials, quick, data
			o.Progress, o.Version = cli.Stderr, cli.Version
			return runBench(cmd.Context(), cli, o, cli.wantJSON(cmd))
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&trials, "trials", 0, fmt.Sprintf("trials per scenario (default %d, %d with --quick)", bench.DefaultTrials, bench.QuickTrials))
	fs.StringVar(&data, "data", "", "directory for the servers' data and the logs, kept (default: a temporary one, removed after a successful run)")
	fs.BoolVar(&quick, "quick", false, "a fast smoke run: fewer tasks, a 5s idle window, smaller assignments, short call windows")
	fs.StringVar(&coordination, "coordination", "", "the runners' coordination backend: etcd (default) or s3 (no etcd is started; detach is reported as skipped)")
	fs.StringVar(&s3lat, "s3-latency", "", "simulated S3 round trip on the runners' and submitters' requests, RTT[,jitter=J] (e.g. 20ms,jitter=10ms); latency-profile measures this one instead of 20ms and 5ms")
	fs.IntSliceVar(&scaleN, "runners", nil, fmt.Sprintf("scale: runner process counts, one row each, e.g. 3,10 (default %s; %s with --quick)",
		joinInts(bench.DefaultScaleRunners()), joinInts(bench.QuickScaleRunners)))
	fs.IntVar(&shards, "shards", 0, fmt.Sprintf("scale: shards (default %d; %d with --quick)", bench.DefaultScaleShards, bench.QuickScaleShards))
	addJSONAlias(cmd)
	return cmd
}

// joinInts renders ns as a comma-separated list.
func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// runBench runs the bench of o and prints its report, as one JSON object
// with every figure or as a table.
func runBench(ctx context.Context, cli *CLI, o bench.Options, asJSON bool) error {
	if err := o.Validate(); err != nil {
		return usageError{err}
	}
	ctx, stop := signalContext(ctx, cli)
	defer stop()
	rep, err := bench.Run(ctx, o)
	if rep != nil && (err == nil || len(rep.Scenarios) > 0) {
		var werr error
		if asJSON {
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
