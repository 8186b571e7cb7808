package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

// counterCall calls the built-in counter with `tenure call --json` and
// returns its total.
func (c *cliCluster) counterCall(id, input string) (int64, error) {
	c.t.Helper()
	out, _, err := c.run(Call, "counter", id, "--input", input, "--json", "--timeout", "20s")
	if err != nil {
		return 0, err
	}
	var got callJSON
	var reply runner.CounterState
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		c.t.Fatalf("call --json output: %v\n%s", err, out)
	}
	if err := json.Unmarshal(got.Reply, &reply); err != nil {
		c.t.Fatalf("counter reply %s: %v", got.Reply, err)
	}
	return reply.Total, nil
}

func (c *cliCluster) mustCount(id, input string, want int64) {
	c.t.Helper()
	got, err := c.counterCall(id, input)
	if err != nil || got != want {
		c.t.Fatalf("call counter %s %s: total %d, %v; want %d", id, input, got, err, want)
	}
}

// TestEntityStateCommands: `tenure call counter` adds durably; `tenure
// entity state get` shows the stored total (text and --json) and a clear
// "no state" naming the key; delete needs --yes, then the entity starts from
// zero (the live instance's next save is fenced first); a corrupt object
// written directly is shown raw with an error naming the key, the entity's
// calls fail on it, and delete repairs it.
func TestEntityStateCommands(t *testing.T) {
	c := newCLICluster(t, true)
	c.startRunner("r1")

	c.mustCount("c1", `{"add":2}`, 2)
	c.mustCount("c1", `{"add":2}`, 4)

	shard := task.ShardOf(storage.DefaultGroup, c.shards, "counter", "c1", "")
	key := state.Key(shard, "counter", "c1")
	out := c.mustRun(Entity, "state", "get", "counter", "c1")
	for _, want := range []string{key, `"total": 4`, "epoch", "rev", "runner    r1", "saved_at"} {
		if !strings.Contains(out, want) {
			t.Errorf("state get does not show %q:\n%s", want, out)
		}
	}
	var got stateJSON
	out = c.mustRun(Entity, "state", "get", "counter", "c1", "--json")
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("state get --json: %v\n%s", err, out)
	}
	if got.Key != key || got.Envelope == nil || string(compact(t, got.State)) != `{"total":4}` || got.Epoch <= 0 || got.Rev < 3 || got.RunnerID != "r1" {
		t.Fatalf("state get --json = %s", out)
	}

	_, _, err := c.run(Entity, "state", "get", "counter", "never")
	assertOneLine(t, "get of an entity without state", err, "no state: "+state.Key(task.ShardOf(storage.DefaultGroup, c.shards, "counter", "never", ""), "counter", "never"))

	if _, _, err := c.run(Entity, "state", "delete", "counter", "c1"); err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("delete without --yes: %v", err)
	}
	c.mustRun(Entity, "state", "get", "counter", "c1") // still there
	if out := c.mustRun(Entity, "state", "delete", "counter", "c1", "--yes"); !strings.Contains(out, "deleted "+key) {
		t.Fatalf("delete printed %q", out)
	}
	if _, _, err := c.run(Entity, "state", "get", "counter", "c1"); err == nil || !strings.Contains(err.Error(), "no state") {
		t.Fatalf("get after delete: %v", err)
	}
	// The live instance read the deleted object: its save is fenced, and
	// the next turn reloads from no state.
	if total, err := c.counterCall("c1", `{"add":1}`); err == nil {
		if total != 1 {
			t.Fatalf("first add after delete: total %d, want an error (fenced) or 1", total)
		}
	} else if !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("first add after delete: %v, want fenced", err)
	} else {
		c.mustCount("c1", `{"add":1}`, 1)
	}

	// A corrupt object, written as an operator's mistake would.
	cfg, err := runner.Load(c.cfgPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := runner.OpenObjectStore(testCtx(t, 10*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	badShard := task.ShardOf(storage.DefaultGroup, c.shards, "counter", "c2", "")
	badKey := state.Key(badShard, "counter", "c2")
	if _, err := obj.Put(testCtx(t, 10*time.Second), badKey, []byte(`{"type":"counter","id":"c2",broken`)); err != nil {
		t.Fatal(err)
	}
	out, _, err = c.run(Entity, "state", "get", "counter", "c2")
	assertOneLine(t, "get of a corrupt object", err, badKey)
	if !errors.Is(err, state.ErrCorrupt) || !strings.Contains(out, `{"type":"counter","id":"c2",broken`) {
		t.Fatalf("get of a corrupt object: err %v, printed:\n%s", err, out)
	}
	if _, err := c.counterCall("c2", `{"add":1}`); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("call to a corrupt entity: %v, want corrupt", err)
	}
	c.mustCount("c1", `{}`, 1) // the rest of the shards unaffected
	c.mustRun(Entity, "state", "delete", "counter", "c2", "--yes")
	c.mustCount("c2", `{"add":5}`, 5)

	for _, args := range [][]string{{"state", "get", "counter"}, {"state", "get", "counter", "a", "b"}, {"state", "get", "counter", ""}, {"state"}, {"nope"}} {
		if _, _, err := c.run(Entity, args...); err == nil {
			t.Errorf("entity %q: no error", args)
		}
	}
}
