package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/runner"
)

const scheduleUsage = `usage: tenure schedule <command> [flags]

commands:
  create NAME --cron EXPR [--tz ZONE] TYPE [--entity ID] [--input JSON] [--catch-up skip|once]
                create a schedule firing a task of TYPE at every tick
  list          list the schedules of the group
  get NAME      show a schedule and its next tick
  pause NAME    stop firing (the pending tick fires nothing)
  resume NAME   fire again from the next tick
  delete NAME   delete a schedule

EXPR has 5 fields (minute hour day-of-month month day-of-week), 6 with
leading seconds, or is a descriptor: @hourly, @daily, @every 30s. ZONE is
an IANA zone (default UTC). Each tick fires exactly one task, with the id
cron-NAME-GENERATION-UNIXSECONDS. Ticks the cluster reaches more than 2s
late (a failover) are missed: --catch-up once fires the latest of them,
late; skip (the default) fires none. Every command takes --json and --group.
`

// Schedule runs `tenure schedule <command>`.
func Schedule(ctx context.Context, cli *CLI, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(cli.Stderr, scheduleUsage)
		return errors.New("missing command (create, list, get, pause, resume or delete)")
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(cli.Stderr, scheduleUsage)
		return flag.ErrHelp
	case "create":
		return scheduleCreate(ctx, cli, args[1:])
	case "list":
		return scheduleList(ctx, cli, args[1:])
	case "get", "pause", "resume", "delete":
		return scheduleNamed(ctx, cli, args[0], args[1:])
	}
	return fmt.Errorf("unknown command %q (create, list, get, pause, resume or delete)", args[0])
}

// scheduleFlags are the flags every schedule command takes.
type scheduleFlags struct {
	group  *string
	asJSON *bool
}

func addScheduleFlags(fs *flag.FlagSet) scheduleFlags {
	return scheduleFlags{
		group:  fs.String("group", "", "shard group (default: \"default\", else the cluster's first)"),
		asJSON: fs.Bool("json", false, "print as JSON"),
	}
}

// connectSchedules connects and returns the schedule client of the group.
func connectSchedules(ctx context.Context, cli *CLI, group string) (*Conn, *schedule.Client, error) {
	cfg, err := cli.LoadConfig(nil)
	if err != nil {
		return nil, nil, flatten(err)
	}
	var opts []runner.ClientOption
	if group != "" {
		opts = append(opts, runner.WithGroup(group))
	}
	conn, err := cli.Connect(ctx, cfg, opts...)
	if err != nil {
		return nil, nil, flatten(err)
	}
	sc, err := conn.client.Schedules()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, sc, nil
}

func scheduleCreate(ctx context.Context, cli *CLI, args []string) error {
	fs := newFlags(cli, "schedule create", scheduleUsage)
	f := addScheduleFlags(fs)
	expr := fs.String("cron", "", "cron `EXPR` (required)")
	tz := fs.String("tz", "", "IANA time `ZONE` the expression is read in (default UTC)")
	entityID := fs.String("entity", "", "entity id the fired tasks are addressed to")
	input := fs.String("input", "", "input of the fired tasks: `JSON`, or @FILE")
	catchUp := fs.String("catch-up", "skip", "missed ticks: skip, or once (fire the first one late)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) < 2:
		return errors.New("create: want NAME and TYPE (tenure schedule create NAME --cron EXPR TYPE)")
	case len(pos) > 2:
		return fmt.Errorf("create: unexpected argument %q after TYPE %q (quote the cron expression: --cron '0 3 * * *')", pos[2], pos[1])
	case *expr == "":
		return errors.New("create: missing --cron EXPR")
	}
	in, err := readInput(*input)
	if err != nil {
		return err
	}
	sp := schedule.Spec{Name: pos[0], Cron: *expr, TZ: *tz, Type: pos[1], Entity: *entityID, Input: in, CatchUp: schedule.CatchUp(*catchUp)}
	conn, sc, err := connectSchedules(ctx, cli, *f.group)
	if err != nil {
		return err
	}
	defer conn.Close()
	adm := newAdmin(cli)
	defer adm.close()
	if w := typeWarning(ctx, conn, adm, sp.Type); w != "" {
		fmt.Fprintln(cli.Stderr, "warning: "+w)
	}
	s, err := sc.Create(ctx, sp)
	if err != nil {
		return err
	}
	return printSchedules(cli, *f.asJSON, false, s)
}

func scheduleList(ctx context.Context, cli *CLI, args []string) error {
	fs := newFlags(cli, "schedule list", "usage: tenure schedule list [--limit N] [--after KEY] [--json]\n\nLists the schedules of the group, in key order.\n")
	f := addScheduleFlags(fs)
	limit := fs.Int("limit", 0, "show at most `N` schedules (default: all)")
	after := fs.String("after", "", "resume a listing after `KEY` (the next key a limited listing prints)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("list: unexpected argument %q", pos[0])
	}
	conn, sc, err := connectSchedules(ctx, cli, *f.group)
	if err != nil {
		return err
	}
	defer conn.Close()
	var all []*schedule.Schedule
	cursor := *after
	for {
		page, next, err := sc.List(ctx, schedule.ListOptions{After: cursor, Limit: *limit})
		if err != nil {
			return err
		}
		all = append(all, page...)
		cursor = next
		if next == "" || (*limit > 0 && len(all) >= *limit) {
			break
		}
	}
	if err := printSchedules(cli, *f.asJSON, true, all...); err != nil {
		return err
	}
	if cursor != "" && !*f.asJSON {
		fmt.Fprintf(cli.Stderr, "more: --after %s\n", cursor)
	}
	return nil
}

func scheduleNamed(ctx context.Context, cli *CLI, name string, args []string) error {
	fs := newFlags(cli, "schedule "+name, fmt.Sprintf("usage: tenure schedule %s NAME [--json]\n", name))
	f := addScheduleFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return fmt.Errorf("%s: missing NAME", name)
	case len(pos) > 1:
		return fmt.Errorf("%s: unexpected argument %q after NAME", name, pos[1])
	}
	conn, sc, err := connectSchedules(ctx, cli, *f.group)
	if err != nil {
		return err
	}
	defer conn.Close()
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
			if *f.asJSON {
				return writeJSON(cli.Stdout, map[string]any{"deleted": pos[0]})
			}
			fmt.Fprintf(cli.Stdout, "deleted schedule %s\n", pos[0])
			return nil
		}
	}
	if err != nil {
		return err
	}
	return printSchedules(cli, *f.asJSON, false, s)
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
	fmt.Fprintln(tw, "NAME\tCRON\tTZ\tTYPE\tENTITY\tCATCH-UP\tSTATE\tNEXT")
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Cron, tz, r.Type, dash(abbrev(r.Entity, 30)), r.CatchUp, state, next)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
