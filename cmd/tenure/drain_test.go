package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
)

// TestRunnersEndToEnd drives the commands against two real runners in this
// process: submit and wait, the unknown-type warning, status, a live config
// change, and a drain that moves every shard to the other runner.
func TestRunnersEndToEnd(t *testing.T) {
	c := newCLICluster(t, false) // the first runner writes the meta
	c.startRunner("r1")
	c.startRunner("r2")
	var rep StatusReport
	testenv.WaitFor(t, "both runners attached and every shard owned", 30*time.Second, func() bool {
		rep = getStatus(t, c)
		r1, r2 := findRunner(rep, "r1"), findRunner(rep, "r2")
		return rep.ShardsOwned == cliShards && r1 != nil && r2 != nil && r1.Attached != nil && *r1.Attached &&
			r2.Attached != nil && *r2.Attached && r1.Owned > 0 && r2.Owned > 0 && r1.Owned+r2.Owned == cliShards
	})
	for _, r := range rep.Runners {
		if !r.Reachable || r.Mode != "enforce" || r.LeaseDeadlineLagSeconds == nil || *r.LeaseDeadlineLagSeconds <= 0 || r.Draining {
			t.Errorf("runner %s: %+v", r.ID, r)
		}
	}

	// submit --wait prints the completed task.
	out, errOut, err := c.run(Task, "submit", "echo", "--input", `{"x":1}`, "--wait")
	if err != nil || !strings.Contains(out, "completed") || !strings.Contains(out, `{"x":1}`) || !strings.Contains(out, "1 of 5") {
		t.Fatalf("submit echo --wait: %v\n%s%s", err, out, errOut)
	}
	if strings.Contains(errOut, "warning") {
		t.Errorf("submit of a handled type warned: %s", errOut)
	}
	tk := decodeTask(t, c.mustRun(Task, "submit", "sleep", "--entity", "e1", "--input", `{"ms":20}`, "--wait", "--json"))
	if tk.Status != task.Completed || string(tk.Result) != `{"slept_ms":20}` || tk.Claim != nil {
		t.Errorf("sleep: %s %s", tk.Status, tk.Result)
	}

	// A failing handler: --wait reports it, with the command's stderr.
	out, _, err = c.run(Task, "submit", "fail", "--max-attempts", "1", "--wait")
	assertOneLine(t, "failing task", err, "ended failed")
	if !strings.Contains(out, "broken") || !strings.Contains(out, "exit status 1") {
		t.Errorf("failed task output lacks its error:\n%s", out)
	}
	_, _, err = c.run(Task, "cancel", tk.Ref())
	if !errors.Is(err, task.ErrTerminal) {
		t.Errorf("cancel of a completed task: err = %v, want ErrTerminal", err)
	}

	// An unknown type is accepted with a warning naming the known ones.
	out, errOut, err = c.run(Task, "submit", "nosuch")
	if err != nil || !strings.Contains(out, "pending") {
		t.Errorf("submit nosuch: %v\n%s", err, out)
	}
	if !strings.Contains(errOut, `warning: no live runner handles task type "nosuch" (they handle: counter, echo, fail, sleep, tenure:schedule)`) {
		t.Errorf("submit nosuch: stderr %q, want the unknown-type warning", errOut)
	}

	// A dynamic config change reaches the runners live.
	var set ConfigReport
	if err := json.Unmarshal([]byte(c.mustRun(ConfigSet, "detachment.mode=observe", "-o", "json")), &set); err != nil ||
		set.Version != 1 || set.Base["detachment.mode"] != "observe" || len(set.Runners) != 2 {
		t.Errorf("config set -o json: %+v (%v), want version 1 with the base and both runners", set, err)
	}
	// set waits until the runners that answer have read what it wrote.
	for _, r := range set.Runners {
		if !r.Reachable || r.ConfigVersion == nil || *r.ConfigVersion != 1 || r.ConfigError != "" {
			t.Errorf("config set -o json, runner %+v: want it running version 1", r)
		}
	}
	testenv.WaitFor(t, "both runners in observe mode on config version 1", 20*time.Second, func() bool {
		rep = getStatus(t, c)
		for _, r := range rep.Runners {
			if r.Mode != "observe" || r.ConfigVersion == nil || *r.ConfigVersion != 1 {
				return false
			}
		}
		return rep.ConfigVersion == 1 && len(rep.Runners) == 2
	})

	// A margin the runners' lease (2s TTL: a keep-alive every 667ms,
	// allowed 333ms) leaves no room for is refused before anything is
	// written, naming a runner, the key and the bound, as the runners
	// would refuse it.
	_, _, err = c.run(ConfigSet, "detachment.margin=1500ms")
	assertOneLine(t, "config set of a margin the runners refuse", err,
		"refused, nothing written: runner r1 refuses dynamic config version 2 (its base layer): detachment.margin: 1.5s is too large for lease.ttl 2s: must be below 1s")
	if code := exitCode(err); code != 1 {
		t.Errorf("refused config set: exit %d, want 1", code)
	}
	if err != nil && !strings.Contains(err.Error(), "1 other runner(s) refuse it too: r2") {
		t.Errorf("refused config set does not name the other runner: %v", err)
	}
	if rep := getConfig(t, c); rep.Version != 1 {
		t.Errorf("a refused change moved the version to %d", rep.Version)
	}
	// Written behind the CLI's back, the runners refuse it; status and
	// config get say so, per runner.
	cv, err := c.etcd.Config(testCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.etcd.PutConfig(testCtx(t, 10*time.Second), []byte(`{"version":2,"base":{"detachment.mode":"observe","detachment.margin":"1500ms"},"rollout":100}`), cv.Revision); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "both runners to refuse version 2", 20*time.Second, func() bool {
		rep = getStatus(t, c)
		for _, r := range rep.Runners {
			if r.ConfigError == "" || r.ConfigVersion == nil || *r.ConfigVersion != 1 {
				return false
			}
		}
		return rep.ConfigVersion == 2 && len(rep.Runners) == 2
	})
	if r1 := findRunner(rep, "r1"); r1 == nil || !strings.Contains(r1.ConfigError, "runner r1 refuses dynamic config version 2") ||
		!strings.Contains(r1.ConfigError, "detachment.margin") {
		t.Errorf("status of r1: %+v", r1)
	}
	if out := c.mustRun(Status); !strings.Contains(out, "refused dynamic config: revision") {
		t.Errorf("human status does not show the refusal:\n%s", out)
	}
	got := getConfig(t, c)
	for _, r := range got.Runners {
		if !r.Reachable || r.ConfigVersion == nil || *r.ConfigVersion != 1 || !strings.Contains(r.ConfigError, "refuses dynamic config version 2") {
			t.Errorf("config get, runner %+v", r)
		}
	}
	if out := c.mustRun(ConfigGet); !strings.Contains(out, "version 1") || !strings.Contains(out, "refused: revision") {
		t.Errorf("config get does not show what each runner runs:\n%s", out)
	}
	// A valid change replaces it; set waits until the runners run it.
	if err := json.Unmarshal([]byte(c.mustRun(ConfigSet, "detachment.margin=500ms", "-o", "json")), &set); err != nil || set.Version != 3 {
		t.Fatalf("config set of a valid margin: %+v, %v", set, err)
	}
	for _, r := range set.Runners {
		if !r.Reachable || r.ConfigVersion == nil || *r.ConfigVersion != 3 || r.ConfigError != "" {
			t.Errorf("after config set, runner %+v, want it on version 3", r)
		}
	}

	// drain moves every shard of r1 to r2 and returns once r1 owns none.
	out = c.mustRun(Drain, "r1", "--wait", "20s")
	if !strings.Contains(out, "runner r1 owns no shards") {
		t.Errorf("drain output:\n%s", out)
	}
	rep = getStatus(t, c)
	r1, r2 := findRunner(rep, "r1"), findRunner(rep, "r2")
	if r1 == nil || r2 == nil || r1.Owned != 0 || !r1.Draining || r2.Owned != cliShards || rep.ShardsUnowned != 0 {
		t.Errorf("after drain: r1 %+v, r2 %+v, unowned %d", r1, r2, rep.ShardsUnowned)
	}
	// Work goes on, on r2; draining again is immediate.
	tk = decodeTask(t, c.mustRun(Task, "submit", "echo", "--input", `"after"`, "--wait", "--json"))
	if tk.Status != task.Completed || string(tk.Result) != `"after"` {
		t.Errorf("after drain: %s %s", tk.Status, tk.Result)
	}
	var dr DrainReport
	if err := json.Unmarshal([]byte(c.mustRun(Drain, "r1", "--wait", "5s", "-o", "json")), &dr); err != nil ||
		dr.Runner != "r1" || !dr.Drained || dr.ShardsMoved != 0 || dr.ShardsLeft == nil || len(dr.ShardsLeft) != 0 {
		t.Errorf("second drain -o json: %+v (%v), want r1 drained, nothing moved or left", dr, err)
	}
}
