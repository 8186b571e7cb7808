//go:build release

package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// The release build (`go build -tags release`, as deploy/build-binary.sh
// and so the image build it) leaves out `tenure dev` and `tenure bench`:
// they link an etcd server and an S3 gateway (VersityGW, with its fiber,
// NATS, Kafka, RabbitMQ, Vault and LDAP clients), which a runner or an
// operator's CLI never uses and image scanners report. The two names stay,
// as commands that say where to find them, rather than "unknown command".

// benchOptions is empty: the release build has no bench to configure.
type benchOptions struct{}

func newDevCmd(cli *CLI) *cobra.Command {
	return notInRelease(cli, "dev", "start a local cluster", "`make dev` or `go run ./cmd/tenure dev`")
}

func newBenchCmd(cli *CLI) *cobra.Command {
	return notInRelease(cli, "bench", "run benchmark scenarios on a local cluster", "`go run ./cmd/tenure bench SCENARIO...`")
}

// notInRelease returns the command name of the release build: whatever
// its arguments and flags, it prints one line saying how to get the real
// one (run from a checkout, with fromCheckout; or a default build) and
// exits 2.
func notInRelease(cli *CLI, name, short, fromCheckout string) *cobra.Command {
	hint := fmt.Sprintf("tenure %s is not in this release build: run it from a checkout of tenure (%s), or build a binary with it: `go build ./cmd/tenure`", name, fromCheckout)
	return &cobra.Command{
		Use:   name,
		Short: short + " (not in this release build)",
		Long:  hint + ".",
		// Its flags are the real command's: none is unknown here.
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(cli.Stderr, hint)
			return errUsageShown
		},
	}
}
