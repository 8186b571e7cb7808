package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
)

const callUsage = `usage: tenure call TYPE ID [--input JSON|@FILE] [--send] [--timeout D] [--group G] [--json]

Calls the entity (TYPE, ID) wherever it lives and prints its reply: the
call is routed to the runner that holds the entity's shard, runs there on
the entity's mailbox (one turn at a time with its tasks) and is not stored.
A call that provably did not start (refused by a runner that no longer owns
the shard, or not sent) is routed again within the timeout; a call whose
outcome is unknown (the connection broke after sending) is reported, never
repeated. Durable delivery is ` + "`tenure task submit`" + `.

--send delivers the message without waiting for the handler: it returns
once the owner has accepted it.
`

// callJSON is what `tenure call --json` prints.
type callJSON struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Send      bool            `json:"send,omitempty"`
	Reply     json.RawMessage `json:"reply,omitempty"`      // the reply when it is JSON
	ReplyText string          `json:"reply_text,omitempty"` // the reply when it is not
	ElapsedMS float64         `json:"elapsed_ms"`
}

// Call is `tenure call`.
func Call(ctx context.Context, cli *CLI, args []string) error {
	fs := newFlags(cli, "call", callUsage)
	input := fs.String("input", "", "request: `JSON`, or @FILE")
	send := fs.Bool("send", false, "send without waiting for the reply")
	timeout := durationFlag{d: 0}
	fs.Var(&timeout, "timeout", "give up after `D` (default: the config's call.timeout, 30s)")
	group := fs.String("group", "", "shard group (default: \"default\", else the cluster's first)")
	asJSON := fs.Bool("json", false, `print {"type", "id", "reply", "elapsed_ms"} as JSON`)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) < 2:
		return errors.New("call: needs TYPE and ID (see tenure call --help)")
	case len(pos) > 2:
		return fmt.Errorf("call: unexpected argument %q after ID %q (flags take one value: quote JSON input)", pos[2], pos[1])
	case pos[1] == "":
		return errors.New("call: ID must not be empty")
	}
	typ, id := pos[0], pos[1]
	if err := task.ValidateType(typ); err != nil {
		return err
	}
	defer startTracing(ctx, cli)()
	in, err := readInput(*input)
	if err != nil {
		return err
	}
	cfg, err := cli.LoadConfig(nil)
	if err != nil {
		return flatten(err)
	}
	if timeout.d > 0 {
		cfg.Call.Timeout = runner.Duration(timeout.d)
	}
	var opts []runner.ClientOption
	if *group != "" {
		opts = append(opts, runner.WithGroup(*group))
	}
	conn, err := cli.Connect(ctx, cfg, opts...)
	if err != nil {
		return flatten(err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, cfg.Call.Timeout.Std())
	defer cancel()
	start := time.Now()
	var reply []byte
	if *send {
		err = conn.client.Send(cctx, typ, id, in)
	} else {
		reply, err = conn.client.Call(cctx, typ, id, in)
	}
	elapsed := time.Since(start)
	if err != nil {
		return fmt.Errorf("call %s %s: %w", typ, id, err)
	}
	if !*asJSON {
		if len(reply) > 0 {
			fmt.Fprintf(cli.Stdout, "%s\n", reply)
		}
		return nil
	}
	out := callJSON{Type: typ, ID: id, Send: *send, ElapsedMS: float64(elapsed.Microseconds()) / 1000}
	if json.Valid(reply) {
		out.Reply = reply
	} else if len(reply) > 0 {
		out.ReplyText = string(reply)
	}
	return writeJSON(cli.Stdout, out)
}
