// Command tenure runs and operates Tenure clusters: `tenure dev` starts a
// local cluster, `tenure run` a runner process, and the other commands
// inspect and operate a cluster through its etcd and S3.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tenurehq/tenure/runner"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

type command struct {
	name, summary string
	run           func(ctx context.Context, cli *CLI, args []string) error
}

func commands() []command {
	return []command{
		{"dev", "start a local cluster: embedded etcd, embedded S3 and N runners", Dev},
		{"run", "run a runner process", Run},
		{"status", "show runners, shard ownership and the config version", Status},
		{"task", "submit, get, list, cancel, replay and inspect tasks", Task},
		{"call", "call an entity (TYPE ID) and print its reply", Call},
		{"entity", "inspect and repair an entity's durable state (state get|delete TYPE ID)", Entity},
		{"schedule", "create, list, get, pause, resume and delete cron schedules", Schedule},
		{"config", "get or set (with staged rollout) the dynamic config", configCommand},
		{"drain", "move a runner's shards away gracefully", Drain},
		{"bench", "run benchmark scenarios on a local cluster", Bench},
		{"version", "print the version", func(_ context.Context, cli *CLI, _ []string) error {
			fmt.Fprintln(cli.Stdout, "tenure", cli.Version)
			return nil
		}},
	}
}

func main() {
	runner.Version = version
	cli := &CLI{Stdout: os.Stdout, Stderr: os.Stderr, Environ: os.Environ(), Version: version}
	os.Exit(Main(context.Background(), cli, os.Args[1:]))
}

// Main runs the command line args and returns the exit status: 0, 1 for a
// failure (one line on stderr), 2 for a usage error.
func Main(ctx context.Context, cli *CLI, args []string) int {
	args, cfgPath, err := extractConfigFlag(args)
	if err != nil {
		fmt.Fprintf(cli.Stderr, "tenure: %v\n", err)
		return 2
	}
	cli.ConfigPath = cfgPath
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(cli.Stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args[0] = "version"
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, cli, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case isUsage(err):
			fmt.Fprintf(cli.Stderr, "tenure %s: %v\n", c.name, oneLine(err))
			return 2
		default:
			fmt.Fprintf(cli.Stderr, "tenure %s: %v\n", c.name, oneLine(err))
			return 1
		}
	}
	fmt.Fprintf(cli.Stderr, "tenure: unknown command %q (see tenure --help)\n", args[0])
	return 2
}

// isUsage reports flag-parsing errors, which the flag package has already
// explained on stderr.
func isUsage(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "flag provided but not defined") || strings.HasPrefix(msg, "invalid value") ||
		strings.HasPrefix(msg, "invalid boolean") || strings.HasPrefix(msg, "bad flag syntax") ||
		strings.HasPrefix(msg, "flag needs an argument")
}

// oneLine keeps an error to one line: joined errors are separated by "; ".
func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
}

// extractConfigFlag removes --config F (or --config=F, -config …) from
// anywhere in args, so that every command accepts it.
func extractConfigFlag(args []string) (rest []string, path string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "config" {
			rest = append(rest, a)
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, "", errors.New("--config needs a file")
			}
			i++
			value = args[i]
		}
		path = value
	}
	return rest, path, nil
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: tenure [--config FILE] <command> [flags]

Tenure runs sharded, stateful services: runners own shards through etcd and
execute durable tasks stored in S3, only while their lease is safely alive.

commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
--config defaults to ./.tenure-dev/tenure.yaml, written by `+"`tenure dev`"+`.
Run `+"`tenure <command> --help`"+` for a command's flags.
`)
}
