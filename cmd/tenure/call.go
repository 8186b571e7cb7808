package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

const callLong = `Calls the entity (TYPE, ID) wherever it lives and prints its reply: the
call is routed to the runner that holds the entity's shard, runs there on
the entity's mailbox (one turn at a time with its tasks) and is not stored.
A call that provably did not start (refused by a runner that no longer owns
the shard, or not sent) is routed again within the timeout; a call whose
outcome is unknown (the connection broke after sending) is reported, never
repeated. Durable delivery is ` + "`tenure task submit`" + `.

A failed call's error ends by saying which of three it is: not applied
(the handler did not run: running the command again is safe), outcome
unknown (the handler may have run), or an application error the handler
returned (its code and details).

A call waits for its entity's shard to have an owner, up to its timeout:
when no runner holds the shard half a second into the call (no runner
live, or the shard between owners), a warning on stderr says so at once
rather than when the timeout ends, and the error of a call that then
times out says it too. It is a warning, not a failure: a runner starting
meanwhile (tenure dev, a rolling restart) still serves the call.

OPERATION names the operation of a type defined by its operations (see
entity.Define), matched without regard to case: ` + "`tenure call counter c1 get`" + `.
Without it the call runs the type's default operation (or, for a type
registered with a plain handler, its handler).

--send delivers the message without waiting for the handler: it returns
once the owner has accepted it. -o json prints {"type", "id", "op",
"reply", "elapsed_ms"} (with "reply_text" instead of "reply" when it is not
JSON; "op" only when one was named).
`

// callJSON is what `tenure call -o json` prints.
type callJSON struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Op        string          `json:"op,omitempty"`
	Send      bool            `json:"send,omitempty"`
	Reply     json.RawMessage `json:"reply,omitempty"`      // the reply when it is JSON
	ReplyText string          `json:"reply_text,omitempty"` // the reply when it is not
	ElapsedMS float64         `json:"elapsed_ms"`
}

func newCallCmd(cli *CLI) *cobra.Command {
	var (
		input, group string
		send         bool
		timeout      durationFlag
	)
	cmd := &cobra.Command{
		Use:   "call TYPE ID [OPERATION]",
		Short: "call an entity (TYPE ID), or one of its operations, and print its reply",
		Long:  callLong,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) < 2:
				return usagef("needs TYPE and ID")
			case len(args) > 3:
				return usagef("unexpected argument %q after OPERATION %q (flags take one value: quote JSON input)", args[3], args[2])
			case args[1] == "":
				return usagef("ID must not be empty")
			case len(args) == 3 && args[2] == "":
				return usagef("OPERATION must not be empty (leave it out for the type's default)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd.Context(), cli, args, input, group, send, timeout.d, cli.wantJSON(cmd))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&input, "input", "", "request: `JSON`, or @FILE")
	fs.BoolVar(&send, "send", false, "send without waiting for the reply")
	fs.Var(&timeout, "timeout", "give up after `D` (default: the config's call.timeout, 30s)")
	fs.StringVar(&group, "group", "", "shard group (default: \"default\", else the cluster's first)")
	addJSONAlias(cmd)
	return cmd
}

// call runs `tenure call`.
func call(ctx context.Context, cli *CLI, pos []string, input, group string, send bool, timeout time.Duration, asJSON bool) error {
	typ, id, op := pos[0], pos[1], ""
	if len(pos) > 2 {
		op = pos[2]
	}
	if err := task.ValidateType(typ); err != nil {
		return err
	}
	if err := task.ValidateOp(op); err != nil {
		return usagef("OPERATION: %v", err)
	}
	defer startTracing(ctx, cli)()
	in, err := readInput(input)
	if err != nil {
		return err
	}
	cfg, err := cli.LoadConfig(nil)
	if err != nil {
		return flatten(err)
	}
	if timeout > 0 {
		cfg.Call.Timeout = runner.Duration(timeout)
	}
	var opts []runner.ClientOption
	if group != "" {
		opts = append(opts, runner.WithGroup(group))
	}
	conn, err := cli.Connect(ctx, cfg, opts...)
	if err != nil {
		return flatten(err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, cfg.Call.Timeout.Std())
	defer cancel()
	shard := task.ShardOf(conn.Group, conn.Meta.Shards, typ, id, "")
	stopWatch := watchCallShard(ctx, cli, conn, shard, cfg.Call.Timeout.Std())
	start := time.Now()
	// Through the Go client (gRPC to the entity's holder), not the HTTP
	// endpoint: no data-plane token is involved.
	reply, err := conn.client.Invoke(cctx, &entity.Message{Type: typ, ID: id, Op: op, Body: in, OneWay: send})
	if send {
		reply = nil
	}
	elapsed := time.Since(start)
	warned := stopWatch()
	if err != nil {
		what := typ + " " + id
		if op != "" {
			what += " " + op
		}
		if warned != "" {
			return fmt.Errorf("call %s: %w (%s); %s", what, err, warned, outcomeWords(err))
		}
		return fmt.Errorf("call %s: %w; %s", what, err, outcomeWords(err))
	}
	if !asJSON {
		if len(reply) > 0 {
			fmt.Fprintf(cli.Stdout, "%s\n", reply)
		}
		return nil
	}
	out := callJSON{Type: typ, ID: id, Op: op, Send: send, ElapsedMS: float64(elapsed.Microseconds()) / 1000}
	if json.Valid(reply) {
		out.Reply = reply
	} else if len(reply) > 0 {
		out.ReplyText = string(reply)
	}
	return writeJSON(cli.Stdout, out)
}

// outcomeWords says what a failed call's error means for whoever runs it
// again (messaging.AppliedOf).
func outcomeWords(err error) string {
	var ae *entity.AppError
	switch {
	case errors.As(err, &ae):
		details := ""
		if len(ae.Details) > 0 {
			details = ", details " + string(ae.Details)
		}
		return fmt.Sprintf("application error %s%s: the handler ran and answered so", ae.Code, details)
	case messaging.AppliedOf(err) == messaging.AppliedNo:
		return "not applied: the handler did not run, running the command again is safe"
	}
	return "outcome unknown: the handler may have run, in part or whole"
}

// callWarnDelay is how long a call runs before the CLI checks that a
// runner holds its entity's shard: long enough that a call to a healthy
// cluster is answered first, short enough to say at once why one is not.
const callWarnDelay = 500 * time.Millisecond

// watchCallShard checks, callWarnDelay into a call, whether a runner holds
// shard, and warns on stderr when none does. The returned stop ends the
// check (it returns at once: the check's reads are cancelled) and returns
// the warning given, if any.
func watchCallShard(ctx context.Context, cli *CLI, conn *Conn, shard storage.ShardID, timeout time.Duration) (stop func() string) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan string, 1)
	go func() {
		warning := ""
		defer func() { done <- warning }()
		timer := time.NewTimer(callWarnDelay)
		defer timer.Stop()
		select {
		case <-wctx.Done():
			return
		case <-timer.C:
		}
		v, err := viewShard(wctx, conn.Store, shard)
		if err != nil || wctx.Err() != nil {
			return
		}
		if msg := v.noRunner(conn.Config.Cluster, shard); msg != "" {
			warning = strings.Replace(msg, "its shard", "the entity's shard", 1)
			fmt.Fprintf(cli.Stderr, "warning: %s: the call waits for one, up to its timeout (%s)\n", warning, timeout)
		}
	}()
	return func() string {
		cancel()
		return <-done
	}
}
