package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

const taskUsage = `usage: tenure task <command> [flags]

commands:
  submit TYPE   submit a task (see tenure task submit --help)
  get REF       show a task
  list          list tasks [--status S] [--type T] [--limit N]
  cancel REF    cancel a pending or running task
  replay REF    run a failed or cancelled task again
  history REF   show a task's transitions
  purge         delete finished tasks: --before TIME [--status S] [--dry-run]

REF is the ref submit prints, "group/index/id". Every command takes --json
to print the task (or list, or history) as JSON; every task in it carries
its "ref".

` + bareIDHelp

const submitUsage = `usage: tenure task submit TYPE [flags]

Submits a task of type TYPE and prints its ref ("group/index/id"), status
and attempt. The task is durable once this returns; it runs on the runner
owning its shard. A warning (not an error) says when no live runner
reports a handler for TYPE: the task then waits until one does.

--input takes JSON, or @FILE to read it from a file. --id makes the submit
idempotent: the same id, type, entity and input give back the existing task.
--wait waits until the task is completed, failed or cancelled and prints
it; the exit status is then 1 unless it completed. --json prints the task
as JSON, with its "ref".
`

// Task runs `tenure task <command>`.
func Task(ctx context.Context, cli *CLI, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(cli.Stderr, taskUsage)
		return errors.New("missing command (submit, get, list, cancel, replay, history or purge)")
	}
	defer startTracing(ctx, cli)()
	switch args[0] {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(cli.Stderr, taskUsage)
		return flag.ErrHelp
	case "submit":
		return TaskSubmit(ctx, cli, args[1:])
	case "get":
		return taskRef(ctx, cli, "get", args[1:], "Shows the task.", func(ctx context.Context, c *task.Client, ref string) (*task.Task, error) {
			return c.Get(ctx, ref)
		})
	case "cancel":
		return taskRef(ctx, cli, "cancel", args[1:], "Cancels the task: a pending one at once, a running one when its handler\nreturns (its context is cancelled now).", func(ctx context.Context, c *task.Client, ref string) (*task.Task, error) {
			return c.Cancel(ctx, ref)
		})
	case "replay":
		return taskRef(ctx, cli, "replay", args[1:], "Runs a failed or cancelled task again: pending, due now, attempts reset.", func(ctx context.Context, c *task.Client, ref string) (*task.Task, error) {
			return c.Replay(ctx, ref)
		})
	case "history":
		return taskHistory(ctx, cli, args[1:])
	case "list":
		return taskList(ctx, cli, args[1:])
	case "purge":
		return taskPurge(ctx, cli, args[1:])
	}
	return fmt.Errorf("unknown command %q (submit, get, list, cancel, replay, history or purge)", args[0])
}

// TaskSubmit runs `tenure task submit`.
func TaskSubmit(ctx context.Context, cli *CLI, args []string) error {
	fs := newFlags(cli, "task submit", submitUsage)
	entityID := fs.String("entity", "", "entity id the task is addressed to (its tasks run one at a time, in order)")
	id := fs.String("id", "", "task id, for an idempotent submit (default: a new UUIDv7)")
	input := fs.String("input", "", "input: `JSON`, or @FILE")
	var delay, timeout durationFlag
	fs.Var(&delay, "delay", "run no sooner than `D` from now (e.g. 30s)")
	fs.Var(&timeout, "timeout", "bound one attempt to `D` (default 5m)")
	maxAttempts := fs.Int("max-attempts", 0, "attempts before the task fails (default 5)")
	group := fs.String("group", "", "shard group (default: \"default\", else the cluster's first)")
	wait := fs.Bool("wait", false, "wait until the task is completed, failed or cancelled")
	asJSON := fs.Bool("json", false, "print the task as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return errors.New("submit: missing TYPE (see tenure task submit --help)")
	case len(pos) > 1:
		return fmt.Errorf("submit: unexpected argument %q after TYPE %q (flags take one value: quote JSON input)", pos[1], pos[0])
	case *maxAttempts < 0:
		return fmt.Errorf("submit: --max-attempts %d: must not be negative", *maxAttempts)
	}
	typ := pos[0]
	if err := task.ValidateType(typ); err != nil {
		return err
	}
	in, err := readInput(*input)
	if err != nil {
		return err
	}
	cfg, err := cli.LoadConfig(nil)
	if err != nil {
		return flatten(err)
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
	adm := newAdmin(cli)
	defer adm.close()

	warning := make(chan string, 1)
	go func() { warning <- typeWarning(ctx, conn, adm, typ) }()
	client := conn.Tasks
	t, created, err := client.Submit(ctx, task.SubmitRequest{
		ID: *id, Type: typ, Entity: *entityID, Input: in,
		Delay: delay.d, MaxAttempts: *maxAttempts, Timeout: timeout.d,
	})
	if w := <-warning; w != "" {
		fmt.Fprintln(cli.Stderr, "warning: "+w)
	}
	if err != nil {
		if t != nil {
			return fmt.Errorf("%w (the task may exist: resubmit with --id %s)", err, t.ID)
		}
		return err
	}
	if !created {
		fmt.Fprintf(cli.Stderr, "task %s already existed with this id and input: not submitted again\n", t.Ref())
	}
	if *wait {
		ref := t.Ref()
		if t, err = client.Wait(ctx, ref, 250*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for %s: %w", ref, err)
		}
	}
	if *asJSON {
		err = writeJSON(cli.Stdout, taskJSON{t})
	} else {
		printTask(cli.Stdout, t, false)
	}
	if err == nil && *wait && t.Status != task.Completed {
		return fmt.Errorf("task %s ended %s", t.Ref(), t.Status)
	}
	return err
}

// readInput returns the --input value as JSON: the text itself, or the
// contents of the file after "@".
func readInput(s string) (json.RawMessage, error) {
	what := "--input"
	b := []byte(s)
	if name, ok := strings.CutPrefix(s, "@"); ok {
		var err error
		if b, err = os.ReadFile(name); err != nil {
			return nil, fmt.Errorf("--input @%s: %w", name, err)
		}
		what = "--input file " + name
	}
	b = []byte(strings.TrimSpace(string(b)))
	if len(b) == 0 {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %v (quote it for the shell: --input '{\"x\":1}')", what, err)
	}
	return b, nil
}

// typeWarning asks the live runners which task types they handle and says
// what is wrong when none reports typ; "" when one does, or when none can
// be asked that reports its types.
func typeWarning(ctx context.Context, conn *Conn, adm *admin, typ string) string {
	runners, _, err := conn.Etcd.Runners(ctx)
	if err != nil && len(runners) == 0 {
		return ""
	}
	if len(runners) == 0 {
		return fmt.Sprintf("no runner is live in cluster %q: the task waits until one starts", conn.Config.Cluster)
	}
	states, errs := adm.runnerStates(ctx, runners)
	known := map[string]bool{}
	asked := 0
	for i, st := range states {
		if errs[i] != nil || !st.HasTypes {
			continue
		}
		asked++
		if slices.Contains(st.Types, typ) {
			return ""
		}
		for _, t := range st.Types {
			known[t] = true
		}
	}
	if asked == 0 {
		return ""
	}
	msg := fmt.Sprintf("no live runner handles task type %q (they handle: %s); the task stays pending until one does",
		typ, strings.Join(slices.Sorted(func(yield func(string) bool) {
			for t := range known {
				if !yield(t) {
					return
				}
			}
		}), ", "))
	if unasked := len(runners) - asked; unasked > 0 {
		msg += fmt.Sprintf(" (%d runner(s) did not say)", unasked)
	}
	return msg
}

// taskRef runs a command taking one task ref: get, cancel, replay.
func taskRef(ctx context.Context, cli *CLI, name string, args []string, what string,
	op func(context.Context, *task.Client, string) (*task.Task, error)) error {
	fs := newFlags(cli, "task "+name, fmt.Sprintf("usage: tenure task %s REF [--json]\n\n%s\n\nREF is the task's ref, group/index/id, as task submit and task list print it.\n%s", name, what, bareIDHelp))
	asJSON := fs.Bool("json", false, "print the task as JSON")
	arg, err := oneRef(fs, name, args)
	if err != nil {
		return err
	}
	conn, err := connectCLI(ctx, cli)
	if err != nil {
		return err
	}
	defer conn.Close()
	ref, err := resolveRef(ctx, conn, arg)
	if err != nil {
		return err
	}
	t, err := op(ctx, conn.Tasks, ref)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(cli.Stdout, taskJSON{t})
	}
	printTask(cli.Stdout, t, name == "get")
	if name == "cancel" && t.Status == task.Running {
		fmt.Fprintln(cli.Stdout, "cancel requested: the handler's context is cancelled; the task ends cancelled when it returns")
	}
	return nil
}

// oneRef parses the flags of a command taking one task ref and returns it.
func oneRef(fs *flag.FlagSet, name string, args []string) (string, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return "", err
	}
	switch len(pos) {
	case 0:
		return "", fmt.Errorf("%s: missing REF (group/index/id, as task submit prints it)", name)
	case 1:
		if strings.Contains(pos[0], "/") {
			if _, _, err := task.ParseRef(pos[0]); err != nil {
				return "", err
			}
		}
		return pos[0], nil
	}
	return "", fmt.Errorf("%s: unexpected argument %q after REF", name, pos[1])
}

// connectCLI loads the config and connects: the common start of commands.
func connectCLI(ctx context.Context, cli *CLI) (*Conn, error) {
	cfg, err := cli.LoadConfig(nil)
	if err != nil {
		return nil, flatten(err)
	}
	conn, err := cli.Connect(ctx, cfg)
	return conn, flatten(err)
}

func taskHistory(ctx context.Context, cli *CLI, args []string) error {
	fs := newFlags(cli, "task history", "usage: tenure task history REF [--json]\n\nShows the task's transitions, oldest first (the task keeps the newest ones).\n\nREF is the task's ref, group/index/id, as task submit and task list print it.\n"+bareIDHelp)
	asJSON := fs.Bool("json", false, `print {"ref", "history": [...], "history_dropped"} as JSON`)
	arg, err := oneRef(fs, "history", args)
	if err != nil {
		return err
	}
	conn, err := connectCLI(ctx, cli)
	if err != nil {
		return err
	}
	defer conn.Close()
	ref, err := resolveRef(ctx, conn, arg)
	if err != nil {
		return err
	}
	t, err := conn.Tasks.Get(ctx, ref)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(cli.Stdout, struct {
			Ref            string            `json:"ref"`
			History        []task.Transition `json:"history"`
			HistoryDropped int               `json:"history_dropped"`
		}{t.Ref(), t.History, t.HistoryDropped})
	}
	tw := tabwriter.NewWriter(cli.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tEVENT\tRUNNER\tATTEMPT\tDETAIL")
	if t.HistoryDropped > 0 {
		fmt.Fprintf(tw, "…\t%d older transitions dropped\t\t\t\n", t.HistoryDropped)
	}
	for _, h := range t.History {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", h.At.UTC().Format(time.RFC3339Nano), h.Event, orDash(h.Runner), h.Attempt, h.Detail)
	}
	return tw.Flush()
}

// listPages bounds the task objects one `task list` reads to
// listPages × task.MaxListScan, so that a filter matching little cannot scan
// a huge bucket; the next cursor resumes.
const listPages = 10

func taskList(ctx context.Context, cli *CLI, args []string) error {
	fs := newFlags(cli, "task list", "usage: tenure task list [--status S] [--type T] [--limit N] [--after CURSOR] [--json]\n\nLists tasks in key order (shard by shard), reading at most 10000 task objects;\nwhen more remain it prints the --after cursor that resumes.\n")
	status := fs.String("status", "", "only tasks in this status: pending, running, completed, failed or cancelled")
	typ := fs.String("type", "", "only tasks of this type")
	limit := fs.Int("limit", 50, "at most this many tasks (1–1000)")
	after := fs.String("after", "", "resume after this cursor (printed by a previous list)")
	asJSON := fs.Bool("json", false, `print {"tasks": [...], "next": CURSOR} as JSON`)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("list: unexpected argument %q", pos[0])
	case *status != "" && !task.Status(*status).Valid():
		return fmt.Errorf("list: --status %q: want pending, running, completed, failed or cancelled", *status)
	case *limit < 1 || *limit > storage.MaxListLimit:
		return fmt.Errorf("list: --limit %d: must be in [1, %d]", *limit, storage.MaxListLimit)
	}
	if *typ != "" {
		if err := task.ValidateType(*typ); err != nil {
			return err
		}
	}
	conn, err := connectCLI(ctx, cli)
	if err != nil {
		return err
	}
	defer conn.Close()
	var tasks []*task.Task
	next := *after
	for range listPages {
		page, n, err := conn.Tasks.List(ctx, task.ListOptions{Status: task.Status(*status), Type: *typ, Limit: *limit - len(tasks), After: next})
		if err != nil {
			return err
		}
		tasks, next = append(tasks, page...), n
		if next == "" || len(tasks) >= *limit {
			break
		}
	}
	if *asJSON {
		out := make([]taskJSON, len(tasks))
		for i, t := range tasks {
			out[i] = taskJSON{t}
		}
		return writeJSON(cli.Stdout, struct {
			Tasks []taskJSON `json:"tasks"`
			Next  string     `json:"next"`
		}{out, next})
	}
	if len(tasks) == 0 {
		fmt.Fprintln(cli.Stdout, "no tasks")
	} else {
		tw := tabwriter.NewWriter(cli.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "REF\tTYPE\tENTITY\tSTATUS\tATTEMPT\tUPDATED")
		for _, t := range tasks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\n", t.Ref(), orDash(t.Type), orDash(t.Entity), orDash(string(t.Status)),
				t.Attempt, t.MaxAttempts, t.UpdatedAt.UTC().Format(time.RFC3339))
		}
		tw.Flush()
	}
	if next != "" {
		fmt.Fprintf(cli.Stdout, "more: tenure task list --after %s\n", next)
	}
	return nil
}

// taskJSON is a task as the CLI prints it in JSON: the stored task's
// fields with its "ref" (group/index/id) first, the handle every command
// takes.
type taskJSON struct{ t *task.Task }

// MarshalJSON encodes the task with "ref" in front.
func (j taskJSON) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(j.t)
	if err != nil {
		return nil, err
	}
	ref, err := json.Marshal(j.t.Ref())
	if err != nil {
		return nil, err
	}
	out := append([]byte(`{"ref":`), ref...)
	if rest := b[1:]; len(rest) > 1 { // b is an object: "{" fields "}"
		out = append(out, ',')
	}
	return append(out, b[1:]...), nil
}

// printTask prints a task for people: the essentials, and with more the
// times, claim and input too.
func printTask(w io.Writer, t *task.Task, more bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("ref", t.Ref())
	row("type", t.Type)
	if t.Entity != "" {
		row("entity", strconv.Quote(t.Entity))
	}
	status := string(t.Status)
	if t.CancelRequested && t.Status == task.Running {
		status += " (cancel requested)"
	}
	row("status", status)
	row("attempt", fmt.Sprintf("%d of %d", t.Attempt, t.MaxAttempts))
	if t.Status == task.Pending && t.AvailableAt.After(t.CreatedAt.Add(time.Millisecond)) { // not just the rounding to ms
		row("due", t.AvailableAt.UTC().Format(time.RFC3339Nano))
	}
	if more {
		if len(t.Input) > 0 {
			row("input", abbrev(string(t.Input), 2000))
		}
		row("created", t.CreatedAt.UTC().Format(time.RFC3339Nano))
		row("updated", t.UpdatedAt.UTC().Format(time.RFC3339Nano))
		row("timeout", t.Timeout.String())
		if c := t.Claim; c != nil {
			row("claim", fmt.Sprintf("runner %s, epoch %d, lease until %s", c.RunnerID, c.Epoch, c.LeaseExpiresAt.UTC().Format(time.RFC3339Nano)))
		}
		if t.Corrupt != "" || t.CorruptSize > 0 {
			row("corrupt", fmt.Sprintf("the stored object did not decode (%d bytes kept)", t.CorruptSize))
		}
	}
	if len(t.Result) > 0 {
		row("result", abbrev(string(t.Result), 2000))
	}
	if t.Error != "" {
		row("error", abbrev(t.Error, 2000))
	}
	tw.Flush()
}

func abbrev(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
