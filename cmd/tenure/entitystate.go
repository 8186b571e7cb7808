package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

const stateGetLong = `Prints the durable state of the entity (TYPE, ID), read straight from the
object store: the state as stored (JSON, pretty-printed), the shard lock
epoch and the runner of the ownership that last wrote it, its revision, when
it was saved, how many task results it records (a task retried after its
state was written completes with its recorded result) and its key. An
entity without a state object fails with "no state", naming the key. A
corrupt object (it does not decode, or names another entity) fails with
the reason, after printing its raw bytes (abbreviated), so that an operator
can repair it: ` + "`tenure entity state delete`" + ` removes it.
`

const stateDeleteLong = `Deletes the durable state object of the entity (TYPE, ID): the repair of a
corrupt object, or a reset. The entity's next activation starts from no
state (its type's zero value). An instance still live on its shard's owner
keeps its state in memory, but its next save is refused as fenced (the
object it read is gone): the instance is discarded and the next turn
reloads, from no state. Without --yes, prints what it would delete and
fails. -o json prints {"key", "type", "id", "size", "deleted"}.
`

// rawShown bounds the bytes of a corrupt object that get prints.
const rawShown = 2048

func newEntityCmd(cli *CLI) *cobra.Command {
	var shardGroup string
	get := &cobra.Command{
		Use:   "get TYPE ID",
		Short: "show an entity's durable state",
		Long:  stateGetLong,
		Args:  typeAndID,
		RunE: func(cmd *cobra.Command, args []string) error {
			return stateGet(cmd.Context(), cli, args, shardGroup, cli.wantJSON(cmd))
		},
	}
	addJSONAlias(get)
	var yes bool
	del := &cobra.Command{
		Use:   "delete TYPE ID --yes",
		Short: "delete an entity's durable state",
		Long:  stateDeleteLong,
		Args:  typeAndID,
		RunE: func(cmd *cobra.Command, args []string) error {
			return stateDelete(cmd.Context(), cli, args, shardGroup, yes, cli.wantJSON(cmd))
		},
	}
	del.Flags().BoolVar(&yes, "yes", false, "delete: without it, only say what would be deleted")
	for _, c := range []*cobra.Command{get, del} {
		c.Flags().StringVar(&shardGroup, "group", "", "shard group (default: \"default\", else the cluster's first)")
	}
	st := group("state", "inspect and repair an entity's durable state", "", get, del)
	return group("entity", "inspect and repair an entity's durable state (state get|delete TYPE ID)", "", st)
}

// typeAndID checks the TYPE ID arguments of the state commands.
func typeAndID(_ *cobra.Command, args []string) error {
	switch {
	case len(args) < 2:
		return usagef("needs TYPE and ID")
	case len(args) > 2:
		return usagef("unexpected argument %q after ID %q", args[2], args[1])
	case args[1] == "":
		return usagef("ID must not be empty: state belongs to an entity")
	}
	return nil
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
func openState(ctx context.Context, cli *CLI, pos []string, group string) (*stateTarget, error) {
	typ, id := pos[0], pos[1]
	if err := task.ValidateType(typ); err != nil {
		return nil, err
	}
	if err := task.ValidateEntity(id); err != nil {
		return nil, err
	}
	conn, err := connectCLI(ctx, cli, group)
	if err != nil {
		return nil, err
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

func stateGet(ctx context.Context, cli *CLI, args []string, group string, asJSON bool) error {
	t, err := openState(ctx, cli, args, group)
	if err != nil {
		return err
	}
	defer t.conn.Close()
	env, etag, err := t.store.Get(ctx, t.shard, t.typ, t.id)
	switch {
	case errors.Is(err, state.ErrNotFound):
		return t.noState()
	case errors.Is(err, state.ErrCorrupt):
		return t.printCorrupt(ctx, cli, err, asJSON)
	case err != nil:
		return fmt.Errorf("%s %s: read %s: %w", t.typ, t.id, t.key, err)
	}
	if asJSON {
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

// stateDeleteJSON is what `tenure entity state delete -o json` prints.
type stateDeleteJSON struct {
	Key     string `json:"key"`
	Type    string `json:"type"`
	ID      string `json:"id"`
	Size    int    `json:"size"`    // of the object, in bytes
	Deleted bool   `json:"deleted"` // false without --yes
}

func stateDelete(ctx context.Context, cli *CLI, args []string, group string, yes, asJSON bool) error {
	t, err := openState(ctx, cli, args, group)
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
	out := stateDeleteJSON{Key: t.key, Type: t.typ, ID: t.id, Size: len(obj.Body)}
	if !yes {
		if asJSON {
			writeJSON(cli.Stdout, out)
		} else {
			fmt.Fprintf(cli.Stdout, "would delete %s (%d bytes), the state of %s %s\n", t.key, len(obj.Body), t.typ, t.id)
		}
		return errors.New("pass --yes to delete")
	}
	if err := t.store.Delete(ctx, t.shard, t.typ, t.id); err != nil {
		return fmt.Errorf("%s %s: delete %s: %w", t.typ, t.id, t.key, err)
	}
	if asJSON {
		out.Deleted = true
		return writeJSON(cli.Stdout, out)
	}
	_, err = fmt.Fprintf(cli.Stdout, "deleted %s: %s %s starts from no state at its next activation\n", t.key, t.typ, t.id)
	return err
}
