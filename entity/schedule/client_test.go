package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
)

// TestCreateRefusesBadSpecs: every bad field is refused at create, before
// any write, with a *ValidationError naming it.
func TestCreateRefusesBadSpecs(t *testing.T) {
	e := newEnv(t, 4)
	ok := Spec{Name: "nightly", Cron: "0 3 * * *", TZ: "Europe/Paris", Type: "echo", Input: json.RawMessage(`{"a":1}`)}
	cases := []struct {
		field string
		edit  func(*Spec)
	}{
		{"name", func(s *Spec) { s.Name = "" }},
		{"name", func(s *Spec) { s.Name = "a/b" }},
		{"cron", func(s *Spec) { s.Cron = "61 * * * *" }},
		{"cron", func(s *Spec) { s.Cron = "every day" }},
		{"cron", func(s *Spec) { s.Cron = "@every" }},
		{"cron", func(s *Spec) { s.Cron = "CRON_TZ=UTC 0 3 * * *" }},
		{"cron", func(s *Spec) { s.Cron = "0 0 30 2 *" }}, // 30 February never comes
		{"tz", func(s *Spec) { s.TZ = "Mars/Olympus" }},
		{"type", func(s *Spec) { s.Type = "" }},
		{"type", func(s *Spec) { s.Type = "a b" }},
		{"entity", func(s *Spec) { s.Entity = "bad\x01" }},
		{"input", func(s *Spec) { s.Input = json.RawMessage(`{`) }},
		{"catch_up", func(s *Spec) { s.CatchUp = "every" }},
		{"catch_up_window", func(s *Spec) { s.CatchUpWindow = 200 * time.Hour }},
		{"catch_up_window", func(s *Spec) { s.CatchUp, s.CatchUpWindow = CatchUpSkip, time.Hour }},
	}
	for _, tc := range cases {
		sp := ok
		tc.edit(&sp)
		_, err := e.c.Create(testCtx(t), sp)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("Create(%+v) = %v, want a ValidationError on %s", sp, err, tc.field)
		}
	}
	if ids := e.taskIDs(t); len(ids) != 0 {
		t.Fatalf("refused creates left tasks: %v", ids)
	}
	ss, _, err := e.c.List(testCtx(t), ListOptions{})
	if err != nil || len(ss) != 0 {
		t.Fatalf("refused creates left schedules: %v %v", ss, err)
	}
}

// TestLifecycle: create writes the object in the driver's shard and the
// first tick's driver task; a second create is refused; list pages over
// every shard; pause and resume flip the flag and resume submits the next
// tick's driver once; delete removes the object and cancels that driver;
// a re-create is a new generation.
func TestLifecycle(t *testing.T) {
	e := newEnv(t, 8)
	ctx := testCtx(t)
	sp := Spec{Name: "every-min", Cron: "* * * * *", Type: "echo", Entity: "e1", Input: json.RawMessage(`{"x":1}`)}
	s, err := e.c.Create(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Date(2026, 11, 22, 17, 6, 0, 0, time.UTC)
	if s.Generation != t0.UnixNano() || s.CatchUp != CatchUpAll || s.CatchUpWindow.Std() != DefaultCatchUpWindow || s.Rev != 1 || s.Shard != ShardOf("default", 8, "every-min") || !s.Next(t0).Equal(first) {
		t.Fatalf("created %+v (next %s)", s, s.Next(t0))
	}
	if _, err := e.c.obj.Head(ctx, Key(s.Shard, "every-min")); err != nil {
		t.Fatalf("object: %v", err)
	}
	d := e.task(t, s.Shard, DriverID("every-min", s.Generation, first))
	if d.Type != DriverType || d.Entity != "every-min" || d.Status != task.Pending || !d.AvailableAt.Equal(first) {
		t.Fatalf("driver %+v", d)
	}
	if _, err := e.c.Create(ctx, sp); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}

	for i := range 4 {
		if _, err := e.c.Create(ctx, Spec{Name: fmt.Sprintf("s%d", i), Cron: "@hourly", Type: "echo"}); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("list does not end")
		}
		page, next, err := e.c.List(ctx, ListOptions{Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page {
			names = append(names, s.Name)
		}
		if next == "" {
			break
		}
		after = next
	}
	if len(names) != 5 {
		t.Fatalf("listed %v, want 5 schedules", names)
	}

	p, err := e.c.Pause(ctx, "every-min")
	if err != nil || !p.Paused || p.Rev != 2 {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if p, err = e.c.Pause(ctx, "every-min"); err != nil || p.Rev != 2 {
		t.Fatalf("pause again: %+v %v", p, err)
	}
	e.clock.set(t0.Add(2 * time.Minute)) // 17:07:12: next tick 17:08
	for range 2 {
		r, err := e.c.Resume(ctx, "every-min")
		if err != nil || r.Paused || r.Rev != 3 {
			t.Fatalf("resume: %+v %v", r, err)
		}
	}
	third := time.Date(2026, 11, 22, 17, 8, 0, 0, time.UTC)
	e.task(t, s.Shard, DriverID("every-min", s.Generation, third))
	if n := len(e.taskIDs(t)[DriverType]); n != 6 {
		t.Fatalf("%d driver tasks, want 6 (5 creates, one resume however often)", n)
	}

	if err := e.c.Delete(ctx, "every-min"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Get(ctx, "every-min"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if d := e.task(t, s.Shard, DriverID("every-min", s.Generation, third)); d.Status != task.Cancelled {
		t.Fatalf("next driver after delete: %s, want cancelled", d.Status)
	}
	if err := e.c.Delete(ctx, "every-min"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	e.clock.set(t0.Add(3 * time.Minute))
	s2, err := e.c.Create(ctx, sp)
	if err != nil || s2.Generation == s.Generation {
		t.Fatalf("re-create: %+v %v", s2, err)
	}
}

// TestIDs: derived ids are valid task ids, distinct across names,
// generations and ticks, and hashed when the name is too long to carry.
func TestIDs(t *testing.T) {
	tick := time.Unix(1_790_000_000, 0)
	seen := map[string]bool{}
	for _, id := range []string{
		TaskID("a", 1, tick), TaskID("a-1", 1, tick), TaskID("a", 2, tick), TaskID("a", 1, tick.Add(time.Second)),
		DriverID("a", 1, tick), TaskID(strings.Repeat("n", 256), 1, tick), TaskID(strings.Repeat("n", 255), 1, tick),
	} {
		if err := task.ValidateID(id); err != nil || seen[id] {
			t.Fatalf("id %q: %v (seen %v)", id, err, seen[id])
		}
		seen[id] = true
	}
	if got := TaskID("a", 1, tick); got != "cron-a-1-1790000000" {
		t.Fatalf("TaskID = %q", got)
	}
	if got := TaskID(strings.Repeat("n", 256), 1, tick); !strings.HasPrefix(got, "cron_") {
		t.Fatalf("long name: %q, want the hashed form", got)
	}
}
