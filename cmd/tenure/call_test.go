package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestCallCommand: `tenure call` prints an entity's reply (as is, and in
// --json), sends with --send, and fails clearly — exit 1, one line naming
// the type and saying whether the handler ran — for a type no runner
// handles (not applied), an application error (its code and details) and
// a call that outlives --timeout (outcome unknown).
func TestCallCommand(t *testing.T) {
	c := newCLICluster(t, true)
	c.startRunner("r1", "slow=exec:sleep 60")

	// The runner's shards may still be moving in: the first call waits for
	// an owner within its timeout.
	out := c.mustRun(Call, "echo", "e1", "--input", `{"x":1}`, "--json", "--timeout", "20s")
	var got callJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if got.Type != "echo" || got.ID != "e1" || string(compact(t, got.Reply)) != `{"x":1}` || got.ElapsedMS <= 0 {
		t.Fatalf("call --json printed %+v", got)
	}
	if out := c.mustRun(Call, "echo", "e2", "--input", `[1,2]`); strings.TrimSpace(out) != `[1,2]` {
		t.Fatalf("call printed %q, want the reply [1,2]", out)
	}
	if out := c.mustRun(Call, "echo", "e3", "--input", `{}`, "--send"); out != "" {
		t.Fatalf("call --send printed %q, want nothing", out)
	}

	_, _, err := c.run(Call, "nope", "n1", "--input", `{}`)
	// Every runner lists its types and none hosts "nope": the caller knows
	// at once, without sending the call (placement by type).
	if err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "entity type not hosted") {
		t.Fatalf("call to an unknown type: %v", err)
	}
	assertOneLine(t, "unknown type", err, "nope")
	if !strings.Contains(err.Error(), "not applied") {
		t.Errorf("call to an unknown type: %v; want it said not applied", err)
	}
	_, _, err = c.run(Call, "counter", "c1", "--input", `{"add":2000000000}`, "--timeout", "20s")
	if err == nil || !strings.Contains(err.Error(), "application error out_of_range, details {") {
		t.Fatalf("an add over the counter's bound: %v; want its application error and details", err)
	}
	assertOneLine(t, "application error", err, "out_of_range")

	// OPERATION: the counter's default (Add) without one, its read-only
	// Get with one (any case), and an unknown one refused, not applied.
	if out := c.mustRun(Call, "counter", "c2", "--input", `{"add":5}`); strings.TrimSpace(out) != `{"total":5}` {
		t.Fatalf("call counter c2 (default op) printed %q", out)
	}
	if out := c.mustRun(Call, "counter", "c2", "get"); strings.TrimSpace(out) != `{"total":5}` {
		t.Fatalf("call counter c2 get printed %q, want the total 5", out)
	}
	out = c.mustRun(Call, "counter", "c2", "Get", "--json")
	got = callJSON{}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Op != "Get" || string(compact(t, got.Reply)) != `{"total":5}` {
		t.Fatalf("call counter c2 Get --json printed %s (%v)", out, err)
	}
	_, _, err = c.run(Call, "counter", "c2", "reset", "--input", `{}`)
	if err == nil || !strings.Contains(err.Error(), `no operation "reset"`) || !strings.Contains(err.Error(), "not applied") ||
		!strings.Contains(err.Error(), "counter c2 reset") {
		t.Fatalf("call of an unknown operation: %v; want it named, not applied", err)
	}
	assertOneLine(t, "unknown operation", err, "reset")

	start := time.Now()
	_, _, err = c.run(Call, "slow", "s1", "--timeout", "300ms")
	if err == nil || !strings.Contains(err.Error(), "deadline") || !strings.Contains(err.Error(), "outcome unknown") {
		t.Fatalf("call past --timeout: %v; want the deadline, outcome unknown (the handler had started)", err)
	}
	// Not a timing bound: the handler sleeps a minute, so returning at all
	// within half of it shows the call ended at its deadline.
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("call with --timeout 300ms returned after %s: it waited for the handler", d)
	}

	for _, args := range [][]string{{"echo"}, {"echo", "a", "b", "c"}, {"echo", "a", "bad op"}, {"echo", "a", ""}, {"echo", "a", "--input", "{not json"}} {
		if _, _, err := c.run(Call, args...); err == nil {
			t.Errorf("call %q: no error", args)
		}
	}
}
