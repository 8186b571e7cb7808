package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

const purgeLong = `Deletes the finished tasks (completed, failed or cancelled) that finished
before TIME, in every shard of every group, straight from the object store:
no runner needs to be running. It applies the rule the runners' retention
sweep (entity.task_retention) applies: pending and running tasks are never
deleted, nor objects that do not decode; a task counts as finished at the
later of its updated_at and its object's LastModified on the S3 server; and
a failed or cancelled task is marked before it is deleted, so that a
concurrent replay is never undone.

TIME is an RFC 3339 time (2026-11-01T00:00:00Z) or an age: a duration
before now on the S3 clock (72h, 90m) or a number of days (30d).
--status keeps to some of the three statuses: repeat it or separate them
with commas (default: all three).

Prints how many tasks were scanned, deleted and kept, and why they were
kept. Cost: one LIST per 1000 tasks, one GET per task last written before
TIME, one DELETE per task deleted (and one PUT per failed or cancelled one).
`

// purgeShardsAtOnce bounds the shards purged at the same time; each purges
// task.DefaultPurgeConcurrency objects at a time.
const purgeShardsAtOnce = 4

func newPurgeCmd(cli *CLI) *cobra.Command {
	var (
		before   beforeFlag
		statuses statusesFlag
		dryRun   bool
	)
	cmd := &cobra.Command{
		Use:   "purge --before TIME",
		Short: "delete finished tasks",
		Long:  purgeLong,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q (give the cutoff with --before)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !before.set {
				return usagef("--before TIME is required: an RFC 3339 time, or an age such as 72h or 30d")
			}
			return taskPurge(cmd.Context(), cli, before, statuses.list, dryRun, cli.wantJSON(cmd))
		},
	}
	fs := cmd.Flags()
	fs.Var(&before, "before", "delete tasks that finished before `TIME` (RFC 3339, or an age: 72h, 30d)")
	fs.Var(&statuses, "status", "only tasks in `S`: completed, failed or cancelled (repeat, or comma-separate; default all three)")
	fs.BoolVar(&dryRun, "dry-run", false, "count what would be deleted; delete nothing")
	addJSONAlias(cmd)
	return cmd
}

// taskPurge runs `tenure task purge`.
func taskPurge(ctx context.Context, cli *CLI, before beforeFlag, statuses []task.Status, dryRun, asJSON bool) error {
	conn, err := connectCLI(ctx, cli, "")
	if err != nil {
		return err
	}
	defer conn.Close()
	store := conn.Tasks.Store()
	cutoff := before.at
	if !before.absolute {
		now, err := store.Now(ctx)
		if err != nil {
			return err
		}
		// The earliest the S3 clock may read: never a cutoff later than
		// the age asked for.
		cutoff = now.Earliest().Add(-before.age)
	}
	var shards []storage.ShardID
	for _, g := range conn.Meta.Groups {
		for i := range conn.Meta.Shards {
			shards = append(shards, storage.ShardID{Group: g, Index: i})
		}
	}
	total, err := purgeShards(ctx, store, shards, task.PurgeOptions{Before: cutoff, Statuses: statuses, DryRun: dryRun})
	rep := newPurgeReport(total, cutoff, statuses, dryRun, len(shards))
	if asJSON {
		if werr := writeJSON(cli.Stdout, rep); err == nil {
			err = werr
		}
	} else {
		rep.print(cli.Stdout)
	}
	if err != nil {
		return fmt.Errorf("purge stopped: %w (the counts above are what was done)", err)
	}
	return nil
}

// purgeShards purges every shard, purgeShardsAtOnce at a time, each to its
// end; the first error stops them all.
func purgeShards(ctx context.Context, store *task.Store, shards []storage.ShardID, o task.PurgeOptions) (task.PurgeResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		total task.PurgeResult
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, purgeShardsAtOnce)
	for _, shard := range shards {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			so := o
			so.Shard = shard
			for {
				res, err := store.Purge(ctx, so)
				mu.Lock()
				total.Add(res)
				if err != nil && first == nil {
					first = fmt.Errorf("shard %s: %w", shard, err)
					cancel()
				}
				mu.Unlock()
				if err != nil || res.Next == "" {
					return
				}
				so.After = res.Next
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return total, first
}

// purgeReport is what `task purge` prints.
type purgeReport struct {
	Before         time.Time     `json:"before"`
	DryRun         bool          `json:"dry_run"`
	Statuses       []task.Status `json:"statuses"`
	Shards         int           `json:"shards"`
	Scanned        int           `json:"scanned"`
	Read           int           `json:"read"`
	Deleted        int           `json:"deleted"` // in a dry run: would be
	Completed      int           `json:"completed"`
	Failed         int           `json:"failed"`
	Cancelled      int           `json:"cancelled"`
	Kept           int           `json:"kept"`
	KeptYoung      int           `json:"kept_finished_after_cutoff"`
	KeptActive     int           `json:"kept_pending_or_running"`
	KeptFiltered   int           `json:"kept_other_status"`
	KeptUnreadable int           `json:"kept_unreadable"`
	KeptChanged    int           `json:"kept_changed_meanwhile"`
}

func newPurgeReport(r task.PurgeResult, before time.Time, statuses []task.Status, dryRun bool, shards int) purgeReport {
	if len(statuses) == 0 {
		statuses = []task.Status{task.Completed, task.Failed, task.Cancelled}
	}
	return purgeReport{
		Before: before.UTC(), DryRun: dryRun, Statuses: statuses, Shards: shards,
		Scanned: r.Scanned, Read: r.Read, Deleted: r.Deleted(),
		Completed: r.Completed, Failed: r.Failed, Cancelled: r.Cancelled,
		Kept: r.Kept(), KeptYoung: r.Young, KeptActive: r.Active, KeptFiltered: r.Filtered,
		KeptUnreadable: r.Unreadable, KeptChanged: r.Changed,
	}
}

func (r purgeReport) print(w io.Writer) {
	verb := "deleted"
	if r.DryRun {
		verb = "would delete"
	}
	names := make([]string, len(r.Statuses))
	for i, s := range r.Statuses {
		names[i] = string(s)
	}
	fmt.Fprintf(w, "%s tasks finished before %s, in %d shards:\n", strings.Join(names, "/"), r.Before.Format(time.RFC3339Nano), r.Shards)
	fmt.Fprintf(w, "  scanned %d\n", r.Scanned)
	fmt.Fprintf(w, "  %s %d (completed %d, failed %d, cancelled %d)\n", verb, r.Deleted, r.Completed, r.Failed, r.Cancelled)
	fmt.Fprintf(w, "  kept %d (finished after the cutoff %d, pending or running %d, other statuses %d, unreadable %d, changed meanwhile %d)\n",
		r.Kept, r.KeptYoung, r.KeptActive, r.KeptFiltered, r.KeptUnreadable, r.KeptChanged)
	if r.DryRun {
		fmt.Fprintln(w, "dry run: nothing was deleted")
	}
}

// beforeFlag is --before: an RFC 3339 time, or an age (a Go duration, or
// whole days with a "d" suffix).
type beforeFlag struct {
	set, absolute bool
	at            time.Time
	age           time.Duration
}

func (f *beforeFlag) String() string {
	switch {
	case f == nil || !f.set:
		return ""
	case f.absolute:
		return f.at.Format(time.RFC3339Nano)
	}
	return f.age.String()
}

// Type names the value in help.
func (f *beforeFlag) Type() string { return "time" }

func (f *beforeFlag) Set(s string) error {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		*f = beforeFlag{set: true, absolute: true, at: t}
		return nil
	}
	age, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		n, aerr := strconv.Atoi(days)
		if aerr == nil && n <= 1<<20 {
			age, err = time.Duration(n)*24*time.Hour, nil
		}
	}
	if err != nil {
		return errors.New("want an RFC 3339 time (2026-11-01T00:00:00Z) or an age (72h, 30d)")
	}
	if age < 0 {
		return errors.New("an age must not be negative")
	}
	*f = beforeFlag{set: true, age: age}
	return nil
}

// statusesFlag is --status: finished statuses, repeated or
// comma-separated.
type statusesFlag struct{ list []task.Status }

func (f *statusesFlag) String() string {
	if f == nil {
		return ""
	}
	names := make([]string, len(f.list))
	for i, s := range f.list {
		names[i] = string(s)
	}
	return strings.Join(names, ",")
}

// Type names the value in help.
func (f *statusesFlag) Type() string { return "statuses" }

func (f *statusesFlag) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		st := task.Status(strings.TrimSpace(part))
		switch {
		case st == task.Pending || st == task.Running:
			return fmt.Errorf("%s tasks are never purged: choose among completed, failed and cancelled", st)
		case !st.IsTerminal():
			return fmt.Errorf("%q is not a finished status: want completed, failed or cancelled", st)
		case !slices.Contains(f.list, st):
			f.list = append(f.list, st)
		}
	}
	return nil
}
