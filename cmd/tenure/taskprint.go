package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/tenurehq/tenure/entity/task"
)

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
