package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

const entityUsage = `usage: tenure entity state <command> TYPE ID [flags]

commands:
  state get TYPE ID      show an entity's durable state
  state delete TYPE ID   delete an entity's durable state (--yes)
`

const stateGetUsage = `usage: tenure entity state get TYPE ID [--group G] [--json]

Prints the durable state of the entity (TYPE, ID), read straight from the
object store: the state as stored (JSON, pretty-printed), the shard lock
epoch and the runner of the ownership that last wrote it, its revision, when
it was saved, how many task results it records (a task retried after its
state was written completes with its recorded result) and its key. An
entity without a state object fails with "no state", naming the key. A
corrupt object (it does not decode, or names another entity) fails with
the reason, after printing its raw bytes (abbreviated), so that an operator
can repair it: ` + "`tenure entity state delete`" + ` removes it.
`

const stateDeleteUsage = `usage: tenure entity state delete TYPE ID --yes [--group G]

Deletes the durable state object of the entity (TYPE, ID): the repair of a
corrupt object, or a reset. The entity's next activation starts from no
state (its type's zero value). An instance still live on its shard's owner
keeps its state in memory, but its next save is refused as fenced (the
object it read is gone): the instance is discarded and the next turn
reloads, from no state. Without --yes, prints what it would delete and
fails.
`

// rawShown bounds the bytes of a corrupt object that get prints.
const rawShown = 2048

// Entity runs `tenure entity <command>`.
func Entity(ctx context.Context, cli *CLI, args []string) error {
	if len(args) > 0 && args[0] == "state" {
		args = args[1:]
		if len(args) > 0 {
			switch args[0] {
			case "get":
				return stateGet(ctx, cli, args[1:])
			case "delete":
				return stateDelete(ctx, cli, args[1:])
			}
		}
	}
	fmt.Fprint(cli.Stderr, entityUsage)
	if len(args) > 0 && isHelp(args[0]) {
		return flag.ErrHelp
	}
	return errors.New("want `entity state get TYPE ID` or `entity state delete TYPE ID`")
}

// stateTarget is the entity a state command names, located in the cluster.
type stateTarget struct {
	conn  *Conn
	store *state.Store
	shard storage.ShardID
	typ   string
	id    string
	key   string
}

// openState parses TYPE ID, connects and locates the entity's shard by the
// cluster meta, as the runners do.
func openState(ctx context.Context, cli *CLI, name string, pos []string, group string) (*stateTarget, error) {
	switch {
	case len(pos) < 2:
		return nil, fmt.Errorf("state %s: needs TYPE and ID (see tenure entity state %s --help)", name, name)
	case len(pos) > 2:
		return nil, fmt.Errorf("state %s: unexpected argument %q after ID %q", name, pos[2], pos[1])
	}
	typ, id := pos[0], pos[1]
	if err := task.ValidateType(typ); err != nil {
		return nil, err
	}
	if err := task.ValidateEntity(id); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("state %s: ID must not be empty: state belongs to an entity", name)
	}
	cfg, err := cli.LoadConfig(nil)
	if err != nil {
		return nil, flatten(err)
	}
	var opts []runner.ClientOption
	if group != "" {
		opts = append(opts, runner.WithGroup(group))
	}
	conn, err := cli.Connect(ctx, cfg, opts...)
	if err != nil {
		return nil, flatten(err)
	}
	shard := task.ShardOf(conn.Group, conn.Meta.Shards, typ, id, "")
	return &stateTarget{conn: conn, store: state.NewStore(conn.Objects), shard: shard, typ: typ, id: id,
		key: state.Key(shard, typ, id)}, nil
}

// noState is the error of an entity without a state object.
func (t *stateTarget) noState() error {
	return fmt.Errorf("%s %s: no state: %s does not exist in shard %s", t.typ, t.id, t.key, t.shard)
}

// stateJSON is what `tenure entity state get --json` prints.
type stateJSON struct {
	Key          string `json:"key"`
	ETag         string `json:"etag"`
	AppliedCount int    `json:"applied_count"`
	*state.Envelope
}

// corruptJSON is what get --json prints for a corrupt object.
type corruptJSON struct {
	Key   string `json:"key"`
	Error string `json:"error"`
	Size  int    `json:"size"`
	Raw   string `json:"raw"` // the first rawShown bytes
}

func stateGet(ctx context.Context, cli *CLI, args []string) error {
	fs := newFlags(cli, "entity state get", stateGetUsage)
	group := fs.String("group", "", "shard group (default: \"default\", else the cluster's first)")
	asJSON := fs.Bool("json", false, "print the stored envelope as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	t, err := openState(ctx, cli, "get", pos, *group)
	if err != nil {
		return err
	}
	defer t.conn.Close()
	env, etag, err := t.store.Get(ctx, t.shard, t.typ, t.id)
	switch {
	case errors.Is(err, state.ErrNotFound):
		return t.noState()
	case errors.Is(err, state.ErrCorrupt):
		return t.printCorrupt(ctx, cli, err, *asJSON)
	case err != nil:
		return fmt.Errorf("%s %s: read %s: %w", t.typ, t.id, t.key, err)
	}
	if *asJSON {
		return writeJSON(cli.Stdout, stateJSON{Key: t.key, ETag: etag, AppliedCount: len(env.Applied), Envelope: env})
	}
	tw := tabwriter.NewWriter(cli.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "entity\t%s %s\n", t.typ, t.id)
	fmt.Fprintf(tw, "key\t%s\n", t.key)
	fmt.Fprintf(tw, "shard\t%s\n", t.shard)
	fmt.Fprintf(tw, "epoch\t%d\n", env.Epoch)
	fmt.Fprintf(tw, "rev\t%d\n", env.Rev)
	fmt.Fprintf(tw, "runner\t%s\n", env.RunnerID)
	fmt.Fprintf(tw, "saved_at\t%s\n", env.SavedAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "applied\t%d task result(s)\n", len(env.Applied))
	if err := tw.Flush(); err != nil {
		return err
	}
	if !env.HasState() {
		_, err := fmt.Fprintln(cli.Stdout, "state:\n(none: null)")
		return err
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, env.State, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(env.State)
	}
	_, err = fmt.Fprintf(cli.Stdout, "state:\n%s\n", pretty.Bytes())
	return err
}

// printCorrupt prints the raw bytes of a corrupt object, abbreviated, and
// returns the decoding error, which names the key.
func (t *stateTarget) printCorrupt(ctx context.Context, cli *CLI, cause error, asJSON bool) error {
	rctx, cancel := context.WithTimeout(ctx, state.DefaultTimeout)
	defer cancel()
	obj, err := t.conn.Objects.Get(rctx, t.key)
	if err != nil {
		return fmt.Errorf("%w (reading its raw bytes: %w)", cause, err)
	}
	raw, size := obj.Body, len(obj.Body)
	if len(raw) > rawShown {
		raw = raw[:rawShown]
	}
	if asJSON {
		if err := writeJSON(cli.Stdout, corruptJSON{Key: t.key, Error: cause.Error(), Size: size, Raw: string(raw)}); err != nil {
			return err
		}
		return cause
	}
	more := ""
	if size > len(raw) {
		more = " … (" + strconv.Itoa(size-len(raw)) + " more bytes)"
	}
	fmt.Fprintf(cli.Stdout, "key\t%s\nraw (%d bytes):\n%s%s\n", t.key, size, raw, more)
	return cause
}

func stateDelete(ctx context.Context, cli *CLI, args []string) error {
	fs := newFlags(cli, "entity state delete", stateDeleteUsage)
	group := fs.String("group", "", "shard group (default: \"default\", else the cluster's first)")
	yes := fs.Bool("yes", false, "delete: without it, only say what would be deleted")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	t, err := openState(ctx, cli, "delete", pos, *group)
	if err != nil {
		return err
	}
	defer t.conn.Close()
	// Read first, raw: a corrupt object must be deletable too, and a
	// missing one is worth saying rather than deleting nothing silently.
	rctx, cancel := context.WithTimeout(ctx, state.DefaultTimeout)
	defer cancel()
	obj, err := t.conn.Objects.Get(rctx, t.key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return t.noState()
	case err != nil:
		return fmt.Errorf("%s %s: read %s: %w", t.typ, t.id, t.key, err)
	}
	if !*yes {
		fmt.Fprintf(cli.Stdout, "would delete %s (%d bytes), the state of %s %s\n", t.key, len(obj.Body), t.typ, t.id)
		return errors.New("state delete: pass --yes to delete")
	}
	if err := t.store.Delete(ctx, t.shard, t.typ, t.id); err != nil {
		return fmt.Errorf("%s %s: delete %s: %w", t.typ, t.id, t.key, err)
	}
	_, err = fmt.Fprintf(cli.Stdout, "deleted %s: %s %s starts from no state at its next activation\n", t.key, t.typ, t.id)
	return err
}

// isHelp reports a help argument.
func isHelp(a string) bool {
	return strings.TrimLeft(a, "-") == "help" || a == "-h"
}
