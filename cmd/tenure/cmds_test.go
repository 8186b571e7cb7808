package main

import (
	"context"
	"slices"
)

// The commands as the tests call them: each runs the command tree, as
// Main does, on its path followed by the arguments.
var (
	Status        = cmdAt("status")
	Task          = cmdAt("task")
	Drain         = cmdAt("drain")
	configCommand = cmdAt("config")
	ConfigGet     = cmdAt("config", "get")
	ConfigSet     = cmdAt("config", "set")
	Call          = cmdAt("call")
	Entity        = cmdAt("entity")
	Schedule      = cmdAt("schedule")
	Run           = cmdAt("run")
	Dev           = cmdAt("dev")
)

// cmdAt returns the command at path as a cmdFunc.
func cmdAt(path ...string) cmdFunc {
	return func(ctx context.Context, cli *CLI, args []string) error {
		_, err := execute(ctx, cli, append(slices.Clone(path), args...))
		return err
	}
}
