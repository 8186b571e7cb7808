package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/entity/task"
)

func decodeSchedule(t *testing.T, out string) scheduleJSON {
	t.Helper()
	var s scheduleJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Schedule == nil {
		t.Fatalf("output is not a schedule: %v\n%s", err, out)
	}
	return s
}

// TestScheduleCommands drives every schedule command against a cluster
// with no runner: create stores the schedule and its first tick's driver
// task, bad expressions and zones fail in one line naming the flag's
// field, and get, list, pause, resume and delete show and change it.
func TestScheduleCommands(t *testing.T) {
	c := newCLICluster(t, true)

	out := c.mustRun(Schedule, "create", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Paris", "echo",
		"--entity", "e1", "--input", `{"x":1}`, "--catch-up", "once", "--json")
	s := decodeSchedule(t, out)
	if s.Name != "nightly" || s.Cron != "0 3 * * *" || s.TZ != "Europe/Paris" || s.Type != "echo" || s.Entity != "e1" ||
		s.CatchUp != schedule.CatchUpOnce || s.Paused || s.Next.IsZero() || !strings.HasSuffix(s.Ref, "/nightly") {
		t.Fatalf("created %+v", s)
	}
	if h := s.Next.In(time.UTC).Hour(); h != 1 && h != 2 { // 03:00 Paris is 01:00 or 02:00 UTC
		t.Fatalf("next tick %s is not 03:00 Paris", s.Next)
	}
	shard, _, err := task.ParseRef(s.Ref)
	if err != nil {
		t.Fatal(err)
	}
	ref := task.Ref(shard, schedule.DriverID("nightly", s.Generation, s.Next))
	if out := c.mustRun(Task, "get", ref, "--json"); decodeTask(t, out).Type != schedule.DriverType {
		t.Fatalf("driver task: %s", out)
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "x", "--cron", "61 * * * *", "echo"}, "schedule: cron"},
		{[]string{"create", "x", "--cron", "@daily", "--tz", "Nowhere/City", "echo"}, "schedule: tz"},
		{[]string{"create", "x", "--cron", "@daily", "--catch-up", "every", "echo"}, "schedule: catch_up"},
		{[]string{"create", "x", "--cron", "@daily", "--catch-up", "skip", "--catch-up-window", "1h", "echo"}, "schedule: catch_up_window"},
		{[]string{"create", "x", "--cron", "@daily", "--catch-up-window", "200h", "echo"}, "schedule: catch_up_window"},
		{[]string{"create", "x", "--cron", "@daily"}, "want NAME and TYPE"},
		{[]string{"create", "nightly", "--cron", "@daily", "echo"}, "already exists"},
		{[]string{"get", "missing"}, "schedule: not found"},
	} {
		_, _, err := c.run(Schedule, bad.args...)
		if err == nil || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line with %q", bad.args, err, bad.want)
		}
	}

	// Without --catch-up a schedule catches up every tick within the
	// default window, or the one given.
	if o := decodeSchedule(t, c.mustRun(Schedule, "create", "often", "--cron", "*/10 * * * * *", "sleep", "--json")); o.CatchUp != schedule.CatchUpAll ||
		o.CatchUpWindow.Std() != schedule.DefaultCatchUpWindow {
		t.Fatalf("created without --catch-up: %+v", o)
	}
	if w := decodeSchedule(t, c.mustRun(Schedule, "create", "window", "--cron", "@hourly", "sleep", "--catch-up-window", "90m", "--json")); w.CatchUp != schedule.CatchUpAll ||
		w.CatchUpWindow.Std() != 90*time.Minute {
		t.Fatalf("created with --catch-up-window 90m: %+v", w)
	}
	var list []scheduleJSON
	if err := json.Unmarshal([]byte(c.mustRun(Schedule, "list", "--json")), &list); err != nil || len(list) != 3 {
		t.Fatalf("list: %v %+v", err, list)
	}
	out = c.mustRun(Schedule, "list")
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		rows[f[0]] = f
	}
	// NAME CRON(1 to 6 words) TZ TYPE ENTITY CATCH-UP WINDOW STATE NEXT:
	// the policy and window are the 4th and 3rd fields from the end.
	policy := func(name string) string {
		f := rows[name]
		if len(f) < 4 {
			return ""
		}
		return f[len(f)-4] + " " + f[len(f)-3]
	}
	if h := rows["NAME"]; len(h) != 9 || h[5] != "CATCH-UP" || h[6] != "WINDOW" ||
		policy("nightly") != "once -" || policy("often") != "all 1h" || policy("window") != "all 1h30m" {
		t.Fatalf("list table:\n%s", out)
	}
	if p := decodeSchedule(t, c.mustRun(Schedule, "pause", "nightly", "--json")); !p.Paused || !p.Next.IsZero() {
		t.Fatalf("paused %+v", p)
	}
	if out := c.mustRun(Schedule, "get", "nightly"); !strings.Contains(out, "paused") {
		t.Fatalf("get of a paused schedule:\n%s", out)
	}
	if r := decodeSchedule(t, c.mustRun(Schedule, "resume", "nightly", "--json")); r.Paused || r.Rev != 3 {
		t.Fatalf("resumed %+v", r)
	}
	c.mustRun(Schedule, "delete", "nightly")
	if _, _, err := c.run(Schedule, "get", "nightly"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("get after delete: %v", err)
	}
}
