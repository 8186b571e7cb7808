package main

import (
	"context"
	"os"

	"github.com/tenurehq/tenure/runner"
)

func main() {
	v := buildVersion(version).String()
	runner.Version = v
	cli := &CLI{Stdout: os.Stdout, Stderr: os.Stderr, Environ: os.Environ(), Version: v}
	os.Exit(Main(context.Background(), cli, os.Args[1:]))
}
