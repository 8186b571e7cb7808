package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
)

// TestTaskPurge: `task purge` deletes finished tasks that finished before
// --before, with no runner running: --dry-run deletes nothing, --status
// (comma-separated or repeated) narrows the statuses, a cutoff before
// everything deletes nothing, and a pending task always stays. Bad
// arguments are refused before anything is touched.
func TestTaskPurge(t *testing.T) {
	c := newCLICluster(t, true)
	r := c.startRunner("purger")
	submit := func(args ...string) *task.Task {
		t.Helper()
		out, errOut, err := c.run(Task, append([]string{"submit"}, append(args, "--json")...)...)
		if out == "" {
			t.Fatalf("submit %q: %v\n%s", args, err, errOut)
		}
		return decodeTask(t, out)
	}
	done1 := submit("echo", "--wait")
	done2 := submit("echo", "--input", `{"n":2}`, "--wait")
	failed := submit("fail", "--max-attempts", "1", "--wait")
	cancelled := submit("echo", "--delay", "1h")
	c.mustRun(Task, "cancel", cancelled.Ref())
	pending := submit("echo", "--delay", "1h")
	if done1.Status != task.Completed || done2.Status != task.Completed || failed.Status != task.Failed {
		t.Fatalf("statuses: %s %s %s", done1.Status, done2.Status, failed.Status)
	}
	r.stop() // the purge needs no runner

	exists := func(tk *task.Task) bool {
		t.Helper()
		_, _, err := c.run(Task, "get", tk.Ref())
		if err != nil && !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("get %s: %v", tk.Ref(), err)
		}
		return err == nil
	}
	all := []*task.Task{done1, done2, failed, cancelled, pending}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--before TIME is required"},
		{[]string{"--before", "yesterday"}, "RFC 3339"},
		{[]string{"--before", "-5m"}, "must not be negative"},
		{[]string{"--before", "1h", "--status", "pending"}, "never purged"},
		{[]string{"--before", "1h", "--status", "completed,running"}, "never purged"},
		{[]string{"--before", "1h", "--status", "done"}, "not a finished status"},
		{[]string{"--before", "1h", "extra"}, "unexpected argument"},
	} {
		_, _, err := c.run(Task, append([]string{"purge"}, tc.args...)...)
		assertOneLine(t, "purge "+strings.Join(tc.args, " "), err, tc.want)
	}
	for _, tk := range all {
		if !exists(tk) {
			t.Fatalf("a refused purge deleted %s", tk.Ref())
		}
	}

	// Everything finished so far finished before a cutoff an hour ahead.
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	report := func(args ...string) purgeReport {
		t.Helper()
		var rep purgeReport
		out := c.mustRun(Task, append([]string{"purge", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("purge %q output: %v\n%s", args, err, out)
		}
		return rep
	}
	if rep := report("--before", future, "--dry-run"); rep.Deleted != 4 || rep.Completed != 2 || rep.Failed != 1 || rep.Cancelled != 1 ||
		rep.KeptActive != 1 || rep.Scanned != 5 || rep.Shards != cliShards || !rep.DryRun {
		t.Fatalf("dry run: %+v", rep)
	}
	for _, tk := range all {
		if !exists(tk) {
			t.Fatalf("a dry run deleted %s", tk.Ref())
		}
	}
	if out := c.mustRun(Task, "purge", "--before", future, "--dry-run"); !strings.Contains(out, "would delete 4") || !strings.Contains(out, "nothing was deleted") {
		t.Errorf("dry run output:\n%s", out)
	}

	// A cutoff before any of them: nothing goes.
	if rep := report("--before", "1000h"); rep.Deleted != 0 || rep.KeptYoung+rep.KeptActive != 5 {
		t.Fatalf("purge --before 1000h: %+v", rep)
	}

	rep := report("--before", future, "--status", "failed,cancelled")
	if rep.Deleted != 2 || rep.Failed != 1 || rep.Cancelled != 1 || rep.KeptFiltered != 2 {
		t.Fatalf("purge --status failed,cancelled: %+v", rep)
	}
	for tk, want := range map[*task.Task]bool{done1: true, done2: true, failed: false, cancelled: false, pending: true} {
		if exists(tk) != want {
			t.Fatalf("after purging failed and cancelled tasks, %s (%s) exists: %v", tk.Ref(), tk.Status, !want)
		}
	}

	out := c.mustRun(Task, "purge", "--before", future, "--status", "completed", "--status", "failed")
	if !strings.Contains(out, "deleted 2 (completed 2, failed 0, cancelled 0)") || !strings.Contains(out, "completed/failed tasks") {
		t.Fatalf("purge --status completed --status failed:\n%s", out)
	}
	for tk, want := range map[*task.Task]bool{done1: false, done2: false, pending: true} {
		if exists(tk) != want {
			t.Fatalf("after purging completed tasks, %s (%s) exists: %v", tk.Ref(), tk.Status, !want)
		}
	}
}
