package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/entity/schedule"
)

const scheduleLong = `EXPR has 5 fields (minute hour day-of-month month day-of-week), 6 with
leading seconds, or is a descriptor: @hourly, @daily, @every 30s. ZONE is
an IANA zone (default UTC). A tick fires at most one task, with the id
cron-NAME-GENERATION-UNIXSECONDS. A tick the cluster reaches more than 2s
late (a failover, a cluster that was down) is late, and --catch-up says
what happens: all (the default) fires every late tick at most
--catch-up-window old (default 1h), in tick order, so that every tick
within the window fires exactly once, and counts older ones as missed;
once fires the latest late tick only; skip fires none. Ticks due while a
schedule is paused never fire. Every command takes -o json and --group.
`

func newScheduleCmd(cli *CLI) *cobra.Command {
	named := func(name, short string) *cobra.Command {
		var group string
		c := &cobra.Command{
			Use:   name + " NAME",
			Short: short,
			Args: func(_ *cobra.Command, args []string) error {
				switch {
				case len(args) == 0:
					return usagef("missing NAME")
				case len(args) > 1:
					return usagef("unexpected argument %q after NAME", args[1])
				}
				return nil
			},
			RunE: func(cmd *cobra.Command, args []string) error {
				return scheduleNamed(cmd.Context(), cli, name, args[0], group, cli.wantJSON(cmd))
			},
		}
		addScheduleFlags(c, &group)
		return c
	}
	return group("schedule", "create, list, get, pause, resume and delete cron schedules", scheduleLong,
		newScheduleCreateCmd(cli),
		newScheduleListCmd(cli),
		named("get", "show a schedule and its next tick"),
		named("pause", "stop firing (the pending tick fires nothing)"),
		named("resume", "fire again from the next tick"),
		named("delete", "delete a schedule"),
	)
}

// addScheduleFlags adds the flags every schedule command takes: --group
// and the --json alias.
func addScheduleFlags(c *cobra.Command, group *string) {
	c.Flags().StringVar(group, "group", "", "shard group (default: \"default\", else the cluster's first)")
	addJSONAlias(c)
}

// connectSchedules connects and returns the schedule client of the group.
func connectSchedules(ctx context.Context, cli *CLI, group string) (*Conn, *schedule.Client, error) {
	conn, err := connectCLI(ctx, cli, group)
	if err != nil {
		return nil, nil, err
	}
	sc, err := conn.client.Schedules()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, sc, nil
}

// createFlags are the flags of `tenure schedule create`.
type createFlags struct {
	group, cron, tz, entity, input, catchUp string
	window                                  time.Duration
}

func newScheduleCreateCmd(cli *CLI) *cobra.Command {
	var f createFlags
	cmd := &cobra.Command{
		Use:   "create NAME --cron EXPR TYPE",
		Short: "create a schedule firing a task of TYPE at every tick",
		Long:  scheduleLong,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) < 2:
				return usagef("want NAME and TYPE (tenure schedule create NAME --cron EXPR TYPE)")
			case len(args) > 2:
				return usagef("unexpected argument %q after TYPE %q (quote the cron expression: --cron '0 3 * * *')", args[2], args[1])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.cron == "" {
				return usagef("missing --cron EXPR")
			}
			return scheduleCreate(cmd.Context(), cli, args, f, cli.wantJSON(cmd))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.cron, "cron", "", "cron `EXPR` (required)")
	fs.StringVar(&f.tz, "tz", "", "IANA time `ZONE` the expression is read in (default UTC)")
	fs.StringVar(&f.entity, "entity", "", "entity id the fired tasks are addressed to")
	fs.StringVar(&f.input, "input", "", "input of the fired tasks: `JSON`, or @FILE")
	fs.StringVar(&f.catchUp, "catch-up", "", "late ticks: all (default: fire each one within the window, in order), once (fire the latest one), or skip")
	fs.DurationVar(&f.window, "catch-up-window", 0, "with --catch-up all: how old a late tick may be and still fire (default 1h, 1s to 168h)")
	addScheduleFlags(cmd, &f.group)
	return cmd
}

func scheduleCreate(ctx context.Context, cli *CLI, pos []string, f createFlags, asJSON bool) error {
	in, err := readInput(f.input)
	if err != nil {
		return err
	}
	sp := schedule.Spec{Name: pos[0], Cron: f.cron, TZ: f.tz, Type: pos[1], Entity: f.entity, Input: in,
		CatchUp: schedule.CatchUp(f.catchUp), CatchUpWindow: f.window}
	conn, sc, err := connectSchedules(ctx, cli, f.group)
	if err != nil {
		return err
	}
	defer conn.Close()
	adm, err := newAdmin(cli, conn.Config)
	if err != nil {
		return err
	}
	defer adm.close()
	if w := typeWarning(ctx, conn, adm, sp.Type); w != "" {
		fmt.Fprintln(cli.Stderr, "warning: "+w)
	}
	s, err := sc.Create(ctx, sp)
	if err != nil {
		return err
	}
	return printSchedules(cli, asJSON, false, s)
}

func newScheduleListCmd(cli *CLI) *cobra.Command {
	var (
		group, after string
		limit        int
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list the schedules of the group",
		Long:  "Lists the schedules of the group, in key order.",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return scheduleList(cmd.Context(), cli, group, limit, after, cli.wantJSON(cmd))
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most `N` schedules (default: all)")
	cmd.Flags().StringVar(&after, "after", "", "resume a listing after `KEY` (the next key a limited listing prints)")
	addScheduleFlags(cmd, &group)
	return cmd
}

func scheduleList(ctx context.Context, cli *CLI, group string, limit int, after string, asJSON bool) error {
	conn, sc, err := connectSchedules(ctx, cli, group)
	if err != nil {
		return err
	}
	defer conn.Close()
	var all []*schedule.Schedule
	cursor := after
	for {
		page, next, err := sc.List(ctx, schedule.ListOptions{After: cursor, Limit: limit})
		if err != nil {
			return err
		}
		all = append(all, page...)
		cursor = next
		if next == "" || (limit > 0 && len(all) >= limit) {
			break
		}
	}
	if err := printSchedules(cli, asJSON, true, all...); err != nil {
		return err
	}
	if cursor != "" && !asJSON {
		fmt.Fprintf(cli.Stderr, "more: --after %s\n", cursor)
	}
	return nil
}

func scheduleNamed(ctx context.Context, cli *CLI, name, schedName, group string, asJSON bool) error {
	conn, sc, err := connectSchedules(ctx, cli, group)
	if err != nil {
		return err
	}
	defer conn.Close()
	pos := []string{schedName}
	var s *schedule.Schedule
	switch name {
	case "get":
		s, err = sc.Get(ctx, pos[0])
	case "pause":
		s, err = sc.Pause(ctx, pos[0])
	case "resume":
		s, err = sc.Resume(ctx, pos[0])
	case "delete":
		if err = sc.Delete(ctx, pos[0]); err == nil {
			if asJSON {
				return writeJSON(cli.Stdout, map[string]any{"deleted": pos[0]})
			}
			fmt.Fprintf(cli.Stdout, "deleted schedule %s\n", pos[0])
			return nil
		}
	}
	if err != nil {
		return err
	}
	return printSchedules(cli, asJSON, false, s)
}

// scheduleJSON is a schedule as --json prints it: the stored fields plus
// its ref and next tick (absent when paused or never again).
type scheduleJSON struct {
	*schedule.Schedule
	Ref  string    `json:"ref"`
	Next time.Time `json:"next,omitzero"`
}

// printSchedules prints one schedule (an object under --json) or a list
// (an array, for list), with each one's next tick after this machine's
// now.
func printSchedules(cli *CLI, asJSON, list bool, ss ...*schedule.Schedule) error {
	now := time.Now()
	rows := make([]scheduleJSON, len(ss))
	for i, s := range ss {
		rows[i] = scheduleJSON{Schedule: s, Ref: s.Ref()}
		if !s.Paused {
			rows[i].Next = s.Next(now)
		}
	}
	if asJSON {
		if !list {
			return writeJSON(cli.Stdout, rows[0])
		}
		return writeJSON(cli.Stdout, rows)
	}
	tw := tabwriter.NewWriter(cli.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCRON\tTZ\tTYPE\tENTITY\tCATCH-UP\tWINDOW\tSTATE\tNEXT")
	for _, r := range rows {
		state, next := "active", "-"
		if r.Paused {
			state = "paused"
		}
		if !r.Next.IsZero() {
			next = r.Next.Local().Format(time.RFC3339)
		}
		tz := r.TZ
		if tz == "" {
			tz = "UTC"
		}
		window := "-" // skip and once fire no tick older than the grace
		if r.CatchUp == schedule.CatchUpAll {
			window = shortDuration(r.CatchUpWindow.Std())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Cron, tz, r.Type, dash(abbrev(r.Entity, 30)), r.CatchUp, window, state, next)
	}
	return tw.Flush()
}

// shortDuration formats d as time.Duration does, without its zero
// trailing units: 1h, 1h30m, 90s reads 1m30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
