package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// rootLong is the description `tenure --help` prints.
const rootLong = `Tenure runs sharded, stateful services: runners own shards through etcd (or
S3 alone, with coordination: s3) and execute durable tasks stored in S3,
only while their lease is safely alive.

The config file is --config, else $TENURE_CONFIG, else
./.tenure-dev/tenure.yaml (written by ` + "`tenure dev`" + `); TENURE_* variables
naming config keys override it. Exit status: 0 success, 1 failure (one line
on stderr), 2 usage error (unknown command or flag, bad flag value, wrong
arguments), 3 a wait ran out before what it waited for happened (task
submit --wait-timeout, drain --wait; one line on stderr saying where
things stand).`

// usageTemplate puts the usage line first, so that `tenure run --help |
// head` shows it, then the description, the subcommands and the flags.
const usageTemplate = `Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} <command> [flags]{{end}}
{{with .Long}}
{{. | trimTrailingWhitespaces}}
{{end}}{{if .HasAvailableSubCommands}}
Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}
{{end}}{{if .HasAvailableLocalFlags}}
Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}
{{end}}{{if .HasAvailableInheritedFlags}}
Global flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}
{{end}}{{if .HasAvailableSubCommands}}
Run "{{.CommandPath}} <command> --help" for a command's flags.
{{end}}`

// usageError is a mistake in the command line: Main exits 2 for it.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitTimedOut is the exit status of a command whose wait ran out before
// what it waited for happened: distinct from a failure (1), so that a
// script can tell "not yet" from "went wrong".
const exitTimedOut = 3

// timedOutError is a wait that ran out: Main exits exitTimedOut for it.
type timedOutError struct{ err error }

func (e timedOutError) Error() string { return e.err.Error() }
func (e timedOutError) Unwrap() error { return e.err }

// usagef returns a usage error.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// Main runs the command line args and returns the exit status: 0, 1 for a
// failure (one line on stderr), 2 for a usage error (one line naming the
// command; the usage alone when no command is given), 3 for a wait that
// ran out (one line).
func Main(ctx context.Context, cli *CLI, args []string) int {
	cmd, err := execute(ctx, cli, args)
	err = cli.withDevHint(err)
	code := exitCode(err)
	name := "tenure"
	if cmd != nil {
		name = cmd.CommandPath()
	}
	switch {
	case code == 0 || errors.Is(err, errUsageShown):
	case code == 2:
		fmt.Fprintf(cli.Stderr, "%s: %s (see %s --help)\n", name, oneLine(err), name)
	default:
		fmt.Fprintf(cli.Stderr, "%s: %s\n", name, oneLine(err))
	}
	return code
}

// exitCode is the exit status of a command's error: 0 for none, 2 for a
// usage error, 3 for a wait that ran out, else 1.
func exitCode(err error) int {
	var ue usageError
	var te timedOutError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	case errors.As(err, &te):
		return exitTimedOut
	}
	return 1
}

// errUsageShown is a usage error already told on stderr: the usage of
// tenure without a command, the line of a command the release build
// leaves out (release.go).
var errUsageShown = usageError{errors.New("usage shown")}

// execute runs args on a new command tree and returns the command that
// ran (nil when none was found) and its error, printing nothing of it.
func execute(ctx context.Context, cli *CLI, args []string) (*cobra.Command, error) {
	root := newRootCmd(cli)
	root.SetArgs(args)
	return root.ExecuteContextC(ctx)
}

// newRootCmd builds the command tree of cli: a new one per run, since the
// flags bind to variables of this run.
func newRootCmd(cli *CLI) *cobra.Command {
	var showVersion bool
	root := &cobra.Command{
		Use:   "tenure",
		Short: "run and operate Tenure clusters",
		Long:  rootLong,
		// Main prints the one-line error; the usage is for --help.
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if showVersion {
				return printVersion(cli)
			}
			cmd.SetOut(cli.Stderr)
			cmd.Usage()
			return errUsageShown
		},
		PersistentPreRunE: func(*cobra.Command, []string) error {
			switch cli.output {
			case "text", "json":
				return nil
			}
			return usagef("-o %q: want text or json", cli.output)
		},
	}
	root.SetOut(cli.Stdout)
	root.SetErr(cli.Stderr)
	root.SetUsageTemplate(usageTemplate)
	root.SetHelpTemplate("{{.UsageString}}")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.CompletionOptions.HiddenDefaultCmd = false
	pf := root.PersistentFlags()
	pf.StringVar(&cli.ConfigPath, "config", cli.ConfigPath, "the config `FILE` (default $TENURE_CONFIG, else ./.tenure-dev/tenure.yaml)")
	pf.StringVarP(&cli.output, "output", "o", "text", "output format: text or json")
	root.Flags().BoolVar(&showVersion, "version", false, "print the version")

	root.AddCommand(
		newDevCmd(cli),
		newRunCmd(cli),
		newStatusCmd(cli),
		newTaskCmd(cli),
		newCallCmd(cli),
		newEntityCmd(cli),
		newScheduleCmd(cli),
		newConfigCmd(cli),
		newDrainCmd(cli),
		newBenchCmd(cli),
		newVersionCmd(cli),
	)
	return root
}

// group returns a command that only holds subcommands: run alone or with
// an unknown subcommand, it fails with a usage error naming them.
func group(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q (%s)", args[0], subNames(cmd))
			}
			return usagef("missing command (%s)", subNames(cmd))
		},
	}
	c.AddCommand(subs...)
	return c
}

// subNames lists a command's subcommands: "a, b or c".
func subNames(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// oneLine keeps an error to one line: joined errors are separated by "; ".
func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
}

// flagChanged reports whether the flag name was given on the line.
func flagChanged(fs *pflag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	return f != nil && f.Changed
}
