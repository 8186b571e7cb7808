package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

const taskLong = `REF is the ref submit prints, "group/index/id". Every command takes -o json
to print the task (or list, or history) as JSON; every task in it carries
its "ref".

` + bareIDHelp

const submitLong = `Submits a task of type TYPE and prints its ref ("group/index/id"), status
and attempt. The task is durable once this returns; it runs on the runner
owning its shard. A warning (not an error) says when no live runner
reports a handler for TYPE: the task then waits until one does.

--input takes JSON, or @FILE to read it from a file. --id makes the submit
idempotent: the same id, type, entity and input give back the existing task.
--wait waits until the task is completed, failed or cancelled and prints
it; the exit status is then 1 unless it completed. The wait is bounded by
--wait-timeout (default 10m, twice a default attempt's timeout; 0 waits
for ever; giving it implies --wait): when it runs out, the task is printed
as it stands and the command exits with status 3, saying whether the task
is pending or running and, while pending, why no runner took it (no runner
live, none holding its shard). The task stays submitted. -o json prints
the task as JSON, with its "ref".
`

// defaultWaitTimeout bounds submit --wait unless --wait-timeout says
// otherwise: twice a default attempt's timeout (5m), so that a task that
// runs one default attempt to its end is waited for, while a wait that
// cannot end (no runner, a task that never starts) does not hang a script.
const defaultWaitTimeout = 10 * time.Minute

// refLong is the help of a command taking one task ref.
func refLong(what string) string {
	return what + "\n\nREF is the task's ref, group/index/id, as task submit and task list print it.\n" + bareIDHelp
}

func newTaskCmd(cli *CLI) *cobra.Command {
	refOp := func(name, short, what string, op func(context.Context, *task.Client, string) (*task.Task, error)) *cobra.Command {
		c := &cobra.Command{
			Use:   name + " REF",
			Short: short,
			Long:  refLong(what),
			Args:  oneRef(name),
			RunE: func(cmd *cobra.Command, args []string) error {
				return taskRef(cmd.Context(), cli, name, args[0], cli.wantJSON(cmd), op)
			},
		}
		addJSONAlias(c)
		return c
	}
	return group("task", "submit, get, list, cancel, replay and inspect tasks", taskLong,
		newSubmitCmd(cli),
		refOp("get", "show a task", "Shows the task.", func(ctx context.Context, c *task.Client, ref string) (*task.Task, error) {
			return c.Get(ctx, ref)
		}),
		newListCmd(cli),
		refOp("cancel", "cancel a pending or running task", "Cancels the task: a pending one at once, a running one when its handler\nreturns (its context is cancelled now).", func(ctx context.Context, c *task.Client, ref string) (*task.Task, error) {
			return c.Cancel(ctx, ref)
		}),
		refOp("replay", "run a failed or cancelled task again", "Runs a failed or cancelled task again: pending, due now, attempts reset.", func(ctx context.Context, c *task.Client, ref string) (*task.Task, error) {
			return c.Replay(ctx, ref)
		}),
		newHistoryCmd(cli),
		newPurgeCmd(cli),
	)
}

// submitFlags are the flags of `tenure task submit`.
type submitFlags struct {
	entity, id, input, group string
	delay, timeout           durationFlag
	maxAttempts              int
	wait                     bool
	waitTimeout              durationFlag
}

func newSubmitCmd(cli *CLI) *cobra.Command {
	f := submitFlags{waitTimeout: durationFlag{d: defaultWaitTimeout, set: true}}
	cmd := &cobra.Command{
		Use:   "submit TYPE",
		Short: "submit a task",
		Long:  submitLong,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usagef("missing TYPE")
			case len(args) > 1:
				return usagef("unexpected argument %q after TYPE %q (flags take one value: quote JSON input)", args[1], args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f.wait = f.wait || flagChanged(cmd.Flags(), "wait-timeout")
			return taskSubmit(cmd.Context(), cli, args[0], f, cli.wantJSON(cmd))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.entity, "entity", "", "entity id the task is addressed to (its tasks run one at a time, in order)")
	fs.StringVar(&f.id, "id", "", "task id, for an idempotent submit (default: a new UUIDv7)")
	fs.StringVar(&f.input, "input", "", "input: `JSON`, or @FILE")
	fs.Var(&f.delay, "delay", "run no sooner than `D` from now (e.g. 30s)")
	fs.Var(&f.timeout, "timeout", "bound one attempt to `D` (default 5m)")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts before the task fails (default 5)")
	fs.StringVar(&f.group, "group", "", "shard group (default: \"default\", else the cluster's first)")
	fs.BoolVar(&f.wait, "wait", false, "wait until the task is completed, failed or cancelled")
	fs.Var(&f.waitTimeout, "wait-timeout", "wait at most `D` (implies --wait; 0: for ever); when it runs out, exit 3")
	addJSONAlias(cmd)
	return cmd
}

// taskSubmit runs `tenure task submit`.
func taskSubmit(ctx context.Context, cli *CLI, typ string, f submitFlags, asJSON bool) error {
	if f.maxAttempts < 0 {
		return usagef("--max-attempts %d: must not be negative", f.maxAttempts)
	}
	if err := task.ValidateType(typ); err != nil {
		return err
	}
	defer startTracing(ctx, cli)()
	in, err := readInput(f.input)
	if err != nil {
		return err
	}
	conn, err := connectCLI(ctx, cli, f.group)
	if err != nil {
		return err
	}
	defer conn.Close()
	adm, err := newAdmin(cli, conn.Config)
	if err != nil {
		return err
	}
	defer adm.close()

	warning := make(chan string, 1)
	go func() { warning <- typeWarning(ctx, conn, adm, typ) }()
	client := conn.Tasks
	t, created, err := client.Submit(ctx, task.SubmitRequest{
		ID: f.id, Type: typ, Entity: f.entity, Input: in,
		Delay: f.delay.d, MaxAttempts: f.maxAttempts, Timeout: f.timeout.d,
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
	var waitErr error
	if f.wait {
		t, waitErr = waitTask(ctx, conn, t, f.waitTimeout.d)
	}
	if asJSON {
		err = writeJSON(cli.Stdout, task.WithRef{T: t})
	} else {
		printTask(cli.Stdout, t, false)
	}
	switch {
	case waitErr != nil:
		return waitErr
	case err == nil && f.wait && t.Status != task.Completed:
		return fmt.Errorf("task %s ended %s", t.Ref(), t.Status)
	}
	return err
}

// waitTask waits until t is terminal, at most timeout (0: no bound), and
// returns it as last read: when the wait runs out, with a timedOutError
// saying where it stands and why.
func waitTask(ctx context.Context, conn *Conn, t *task.Task, timeout time.Duration) (*task.Task, error) {
	ref := t.Ref()
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	got, err := conn.Tasks.Wait(wctx, ref, 250*time.Millisecond)
	if got != nil {
		t = got
	}
	switch {
	case err == nil:
		return t, nil
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return t, taskWaitTimedOut(ctx, conn, ref, got, timeout)
	}
	return t, fmt.Errorf("waiting for %s: %w", ref, err)
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
	runners, _, err := conn.Store.Runners(ctx)
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
func taskRef(ctx context.Context, cli *CLI, name, arg string, asJSON bool,
	op func(context.Context, *task.Client, string) (*task.Task, error)) error {
	conn, err := connectCLI(ctx, cli, "")
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
	if asJSON {
		return writeJSON(cli.Stdout, task.WithRef{T: t})
	}
	printTask(cli.Stdout, t, name == "get")
	if name == "cancel" && t.Status == task.Running {
		fmt.Fprintln(cli.Stdout, "cancel requested: the handler's context is cancelled; the task ends cancelled when it returns")
	}
	return nil
}

// oneRef checks the arguments of a command taking one task ref.
func oneRef(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch len(args) {
		case 0:
			return usagef("missing REF (group/index/id, as task submit prints it)")
		case 1:
			if strings.Contains(args[0], "/") {
				if _, _, err := task.ParseRef(args[0]); err != nil {
					return usageError{err}
				}
			}
			return nil
		}
		return usagef("unexpected argument %q after REF", args[1])
	}
}

// connectCLI loads the config and connects (to the shard group group, ""
// for the default): the common start of commands.
func connectCLI(ctx context.Context, cli *CLI, group string) (*Conn, error) {
	cfg, err := cli.LoadConfig(nil)
	if err != nil {
		return nil, flatten(err)
	}
	var opts []runner.ClientOption
	if group != "" {
		opts = append(opts, runner.WithGroup(group))
	}
	conn, err := cli.Connect(ctx, cfg, opts...)
	return conn, flatten(err)
}

func newHistoryCmd(cli *CLI) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history REF",
		Short: "show a task's transitions",
		Long:  refLong("Shows the task's transitions, oldest first (the task keeps the newest ones).\n-o json prints {\"ref\", \"history\": [...], \"history_dropped\"}."),
		Args:  oneRef("history"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return taskHistory(cmd.Context(), cli, args[0], cli.wantJSON(cmd))
		},
	}
	addJSONAlias(cmd)
	return cmd
}

func taskHistory(ctx context.Context, cli *CLI, arg string, asJSON bool) error {
	conn, err := connectCLI(ctx, cli, "")
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
	if asJSON {
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

// listFlags are the flags of `tenure task list`.
type listFlags struct {
	status, typ, after string
	limit              int
}

func newListCmd(cli *CLI) *cobra.Command {
	var f listFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list tasks",
		Long: `Lists tasks in key order (shard by shard), reading at most 10000 task objects;
when more remain it prints the --after cursor that resumes. -o json prints
{"tasks": [...], "next": CURSOR}.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return taskList(cmd.Context(), cli, f, cli.wantJSON(cmd))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.status, "status", "", "only tasks in this status: pending, running, completed, failed or cancelled")
	fs.StringVar(&f.typ, "type", "", "only tasks of this type")
	fs.IntVar(&f.limit, "limit", 50, "at most this many tasks (1–1000)")
	fs.StringVar(&f.after, "after", "", "resume after this cursor (printed by a previous list)")
	addJSONAlias(cmd)
	return cmd
}

func taskList(ctx context.Context, cli *CLI, f listFlags, asJSON bool) error {
	switch {
	case f.status != "" && !task.Status(f.status).Valid():
		return usagef("--status %q: want pending, running, completed, failed or cancelled", f.status)
	case f.limit < 1 || f.limit > storage.MaxListLimit:
		return usagef("--limit %d: must be in [1, %d]", f.limit, storage.MaxListLimit)
	}
	if f.typ != "" {
		if err := task.ValidateType(f.typ); err != nil {
			return usageError{err}
		}
	}
	conn, err := connectCLI(ctx, cli, "")
	if err != nil {
		return err
	}
	defer conn.Close()
	var tasks []*task.Task
	next := f.after
	for range listPages {
		page, n, err := conn.Tasks.List(ctx, task.ListOptions{Status: task.Status(f.status), Type: f.typ, Limit: f.limit - len(tasks), After: next})
		if err != nil {
			return err
		}
		tasks, next = append(tasks, page...), n
		if next == "" || len(tasks) >= f.limit {
			break
		}
	}
	if asJSON {
		out := make([]task.WithRef, len(tasks))
		for i, t := range tasks {
			out[i] = task.WithRef{T: t}
		}
		return writeJSON(cli.Stdout, struct {
			Tasks []task.WithRef `json:"tasks"`
			Next  string         `json:"next"`
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
