package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
)

func decodeTask(t *testing.T, out string) *task.Task {
	t.Helper()
	var tk task.Task
	if err := json.Unmarshal([]byte(out), &tk); err != nil {
		t.Fatalf("output is not a task: %v\n%s", err, out)
	}
	tk.Input, tk.Result = compact(t, tk.Input), compact(t, tk.Result)
	return &tk
}

// compact undoes the indentation of --json output inside raw JSON fields.
func compact(t *testing.T, b json.RawMessage) json.RawMessage {
	t.Helper()
	if len(b) == 0 {
		return b
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestTaskCommandsIdleCluster drives every task command against a cluster
// with no runner: tasks stay where the commands put them.
func TestTaskCommandsIdleCluster(t *testing.T) {
	c := newCLICluster(t, true)

	out, errOut, err := c.run(Task, "submit", "echo", "--input", `{"x":1}`, "--json")
	if err != nil {
		t.Fatal(err)
	}
	tk := decodeTask(t, out)
	if tk.Status != task.Pending || tk.Type != "echo" || string(tk.Input) != `{"x":1}` || tk.MaxAttempts != task.DefaultMaxAttempts {
		t.Fatalf("submitted %+v", tk)
	}
	if !strings.Contains(errOut, "warning: no runner is live") {
		t.Errorf("submit with no runner: stderr %q, want a warning", errOut)
	}
	ref := tk.Ref()

	// get, by ref and by bare id (an entity-less task's shard follows from its id).
	out = c.mustRun(Task, "get", ref)
	for _, want := range []string{ref, "pending", "0 of 5", `{"x":1}`} {
		if !strings.Contains(out, want) {
			t.Errorf("task get: output lacks %q:\n%s", want, out)
		}
	}
	if got := decodeTask(t, c.mustRun(Task, "get", tk.ID, "--json")); got.Ref() != ref {
		t.Errorf("task get by id: %s, want %s", got.Ref(), ref)
	}

	// A delayed entity's task (its id chosen to hash to another shard than
	// its entity: TestTaskBareID looks it up by id).
	eid := "etask-0"
	for i := 1; task.ShardOf("default", cliShards, "", "", eid) == task.ShardOf("default", cliShards, "sleep", "acct 7", ""); i++ {
		eid = fmt.Sprintf("etask-%d", i)
	}
	etk := decodeTask(t, c.mustRun(Task, "submit", "sleep", "--id", eid, "--entity", "acct 7", "--delay", "1h", "--input", `{"ms":1}`, "--json"))
	if etk.Entity != "acct 7" || !etk.AvailableAt.After(etk.CreatedAt.Add(59*time.Minute)) {
		t.Errorf("delayed entity task: %+v", etk)
	}
	if out := c.mustRun(Task, "get", etk.Ref()); !strings.Contains(out, "due") || !strings.Contains(out, `"acct 7"`) {
		t.Errorf("delayed task: get shows no due time or entity:\n%s", out)
	}

	// Idempotent submit with --id; a different input under the same id conflicts.
	file := filepath.Join(t.TempDir(), "in.json")
	os.WriteFile(file, []byte(` {"a": 1}`+"\n"), 0o600)
	first := decodeTask(t, c.mustRun(Task, "submit", "echo", "--id", "job-1", "--input", "@"+file, "--json"))
	out, errOut, err = c.run(Task, "submit", "echo", "--id", "job-1", "--input", `{"a": 1}`, "--json")
	if err != nil || decodeTask(t, out).Ref() != first.Ref() || !strings.Contains(errOut, "already existed") {
		t.Errorf("resubmit: %v, stderr %q, want the existing task", err, errOut)
	}
	_, _, err = c.run(Task, "submit", "echo", "--id", "job-1", "--input", `{"a": 2}`)
	if !errors.Is(err, task.ErrConflict) {
		t.Errorf("resubmit with other input: err = %v, want ErrConflict", err)
	}

	// list, filtered.
	var listed struct {
		Tasks []*task.Task `json:"tasks"`
		Next  string       `json:"next"`
	}
	if err := json.Unmarshal([]byte(c.mustRun(Task, "list", "--json")), &listed); err != nil || len(listed.Tasks) != 3 || listed.Next != "" {
		t.Errorf("task list: %d tasks, next %q, %v; want 3", len(listed.Tasks), listed.Next, err)
	}
	json.Unmarshal([]byte(c.mustRun(Task, "list", "--type", "sleep", "--json")), &listed)
	if len(listed.Tasks) != 1 || listed.Tasks[0].Ref() != etk.Ref() {
		t.Errorf("task list --type sleep: %v", listed.Tasks)
	}
	if out := c.mustRun(Task, "list", "--status", "completed"); !strings.Contains(out, "no tasks") {
		t.Errorf("task list --status completed: %s", out)
	}
	out = c.mustRun(Task, "list", "--limit", "2")
	if n := strings.Count(out, "\ndefault/"); n != 2 || !strings.Contains(out, "--after") {
		t.Errorf("task list --limit 2: %d rows, want 2 and a cursor:\n%s", n, out)
	}

	// cancel, cancel again (idempotent), replay, history.
	if got := decodeTask(t, c.mustRun(Task, "cancel", ref, "--json")); got.Status != task.Cancelled {
		t.Errorf("cancel: status %s", got.Status)
	}
	if out := c.mustRun(Task, "cancel", ref); !strings.Contains(out, "cancelled") {
		t.Errorf("second cancel: %s", out)
	}
	_, _, err = c.run(Task, "replay", etk.Ref())
	if !errors.Is(err, task.ErrInvalidTransition) {
		t.Errorf("replay of a pending task: err = %v, want ErrInvalidTransition", err)
	}
	if got := decodeTask(t, c.mustRun(Task, "replay", ref, "--json")); got.Status != task.Pending || got.Attempt != 0 {
		t.Errorf("replay: %s attempt %d", got.Status, got.Attempt)
	}
	var hist struct {
		Ref     string            `json:"ref"`
		History []task.Transition `json:"history"`
	}
	if err := json.Unmarshal([]byte(c.mustRun(Task, "history", ref, "--json")), &hist); err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, h := range hist.History {
		events = append(events, h.Event)
	}
	if hist.Ref != ref || strings.Join(events, ",") != "submitted,cancelled,replayed" {
		t.Errorf("history of %s: %v", hist.Ref, events)
	}
	if out := c.mustRun(Task, "history", tk.ID); !strings.Contains(out, "replayed") || !strings.Contains(out, "EVENT") {
		t.Errorf("history table:\n%s", out)
	}

	_, _, err = c.run(Task, "get", "default/3/nope")
	if !errors.Is(err, task.ErrNotFound) {
		t.Errorf("get of a missing task: err = %v, want ErrNotFound", err)
	}
}

// TestBadInput: every command refuses bad input with one clear line,
// before touching the cluster where it can.
func TestBadInput(t *testing.T) {
	c := newCLICluster(t, true)
	for _, tc := range []struct {
		name string
		fn   cmdFunc
		args []string
		want string
		code int // the exit status Main gives it: 2 for a usage error
	}{
		{"status unknown flag", Status, []string{"--bogus"}, "unknown flag: --bogus", 2},
		{"status argument", Status, []string{"extra"}, `unexpected argument "extra"`, 2},
		{"task no command", Task, nil, "missing command", 2},
		{"task unknown command", Task, []string{"frob"}, `unknown command "frob"`, 2},
		{"submit no type", Task, []string{"submit"}, "missing TYPE", 2},
		{"submit bad type", Task, []string{"submit", "bad type"}, "invalid type", 1},
		{"submit bad JSON", Task, []string{"submit", "echo", "--input", "{x"}, "--input is not valid JSON", 1},
		{"submit unquoted JSON", Task, []string{"submit", "echo", "--input", "{x:", "1}"}, `unexpected argument "1}"`, 2},
		{"submit missing file", Task, []string{"submit", "echo", "--input", "@/nonexistent/in.json"}, "/nonexistent/in.json", 1},
		{"submit bad delay", Task, []string{"submit", "echo", "--delay", "soon"}, `invalid argument "soon" for "--delay" flag: want a duration`, 2},
		{"submit negative delay", Task, []string{"submit", "echo", "--delay", "-5s"}, "must not be negative", 2},
		{"submit bad attempts", Task, []string{"submit", "echo", "--max-attempts", "-1"}, "--max-attempts -1", 2},
		{"submit unknown flag", Task, []string{"submit", "echo", "--retries", "3"}, "unknown flag: --retries", 2},
		{"get no ref", Task, []string{"get"}, "missing REF", 2},
		{"get bad ref", Task, []string{"get", "a/b/c"}, `malformed task ref "a/b/c"`, 2},
		{"cancel two refs", Task, []string{"cancel", "default/1/a", "default/1/b"}, "unexpected argument", 2},
		{"list bad status", Task, []string{"list", "--status", "done"}, `--status "done"`, 2},
		{"list bad limit", Task, []string{"list", "--limit", "0"}, "--limit 0", 2},
		{"config no command", configCommand, nil, "missing command", 2},
		{"config set nothing", configCommand, []string{"set"}, "nothing to set", 2},
		{"config set unknown key", ConfigSet, []string{"detachment.bogus=1"}, "detachment.bogus cannot change at run time", 1},
		{"config set static key", ConfigSet, []string{"lease.ttl=5s"}, "lease.ttl cannot change at run time", 1},
		{"config set bad mode", ConfigSet, []string{"detachment.mode=bogus"}, `detachment.mode = "bogus"`, 1},
		{"config set bad duration", ConfigSet, []string{"detachment.margin=fast"}, `detachment.margin = "fast"`, 1},
		{"config set rollout 150", ConfigSet, []string{"detachment.mode=observe", "--rollout", "150"}, "--rollout 150", 2},
		{"config set not kv", ConfigSet, []string{"detachment.mode"}, "want KEY=VALUE", 2},
		{"config set twice", ConfigSet, []string{"detachment.mode=off", "detachment.mode=observe"}, "given twice", 2},
		{"config get argument", ConfigGet, []string{"x"}, `unexpected argument "x"`, 2},
		{"drain no runner", Drain, nil, "missing RUNNER-ID", 2},
		{"drain bad wait", Drain, []string{"r1", "--wait", "long"}, `invalid argument "long" for "--wait" flag`, 2},
		{"drain unknown runner", Drain, []string{"nobody"}, `runner "nobody" is not live`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := c.run(tc.fn, tc.args...)
			assertOneLine(t, tc.name, err, tc.want)
			if code := exitCode(err); code != tc.code {
				t.Errorf("%s: exit status %d, want %d (err %v)", tc.name, code, tc.code, err)
			}
		})
	}

	// Nothing was written by the refused config changes.
	ctx := testCtx(t, 10*time.Second)
	if cv, err := c.etcd.Config(ctx); err != nil || cv.Value != nil {
		t.Errorf("a refused config set wrote %q (%v)", cv.Value, err)
	}

	// --help prints the usage on stdout and succeeds, for every command.
	for _, tc := range []struct {
		fn   cmdFunc
		args []string
		want string
	}{
		{Status, []string{"--help"}, "Usage:\n  tenure status [flags]"},
		{Task, []string{"--help"}, "Usage:\n  tenure task <command> [flags]"},
		{Task, []string{"submit", "-h"}, "Usage:\n  tenure task submit TYPE [flags]"},
		{Task, []string{"list", "--help"}, "Usage:\n  tenure task list [flags]"},
		{configCommand, []string{"set", "--help"}, "detachment.recover_window"},
		{configCommand, []string{"get", "-h"}, "Usage:\n  tenure config get [flags]"},
		{Drain, []string{"--help"}, "Usage:\n  tenure drain RUNNER-ID [flags]"},
	} {
		out, errOut, err := c.run(tc.fn, tc.args...)
		if err != nil || !strings.HasPrefix(out, "Usage:") || !strings.Contains(out, tc.want) || errOut != "" {
			t.Errorf("%q: err = %v, stdout %q, stderr %q; want no error and the usage on stdout", tc.args, err, out, errOut)
		}
	}
}

// TestExecHandlerRunsTenure: an exec: handler's command runs `tenure task
// submit` (this test binary acting as tenure) with the TENURE_TASK_*
// variables its runner gives it, and the task it submits is there.
func TestExecHandlerRunsTenure(t *testing.T) {
	c := newCLICluster(t, true)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c.startRunner("r1", fmt.Sprintf(`spawn=exec:%s=1 '%s' --config '%s' task submit echo --id "child-of-$TENURE_TASK_ID" --input "{\"parent\":\"$TENURE_TASK_REF\"}" --json`,
		cliMainEnv, self, c.cfgPath))
	out, errOut, err := c.run(Task, "submit", "spawn", "--wait", "--json")
	if err != nil {
		t.Fatalf("the spawn task: %v\n%s\n%s", err, out, errOut)
	}
	parent := decodeTask(t, out)
	if ref := refOf(t, out); ref != parent.Ref() {
		t.Errorf("submit --wait --json: ref %q, want %s", ref, parent.Ref())
	}
	var child task.Task
	if err := json.Unmarshal(parent.Result, &child); err != nil {
		t.Fatalf("the handler printed no task: %v\n%s", err, parent.Result)
	}
	if child.ID != "child-of-"+parent.ID {
		t.Errorf("child id %q, want child-of-%s", child.ID, parent.ID)
	}
	if ref := refOf(t, string(parent.Result)); ref != child.Ref() {
		t.Errorf("the handler's submit --json: ref %q, want %s", ref, child.Ref())
	}
	got := decodeTask(t, c.mustRun(Task, "get", child.Ref(), "--json"))
	if want := `{"parent":"` + parent.Ref() + `"}`; got.Type != "echo" || string(got.Input) != want {
		t.Errorf("child task %s: type %s, input %s; want echo, %s", got.Ref(), got.Type, got.Input, want)
	}
}

// refOf returns the "ref" field of the JSON object out.
func refOf(t *testing.T, out string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, out)
	}
	var ref string
	json.Unmarshal(m["ref"], &ref)
	return ref
}

// TestTaskJSONCarriesRef: every task the task commands print as JSON has
// its "ref" (submit --wait: TestExecHandlerRunsTenure).
func TestTaskJSONCarriesRef(t *testing.T) {
	c := newCLICluster(t, true)
	out := c.mustRun(Task, "submit", "echo", "--json")
	ref := decodeTask(t, out).Ref()
	if got := refOf(t, out); got != ref {
		t.Errorf("submit --json: ref %q, want %s", got, ref)
	}
	for _, args := range [][]string{{"get", ref}, {"cancel", ref}, {"replay", ref}, {"get", strings.Split(ref, "/")[2]}} {
		if got := refOf(t, c.mustRun(Task, append(args, "--json")...)); got != ref {
			t.Errorf("%q --json: ref %q, want %s", args, got, ref)
		}
	}
	eref := decodeTask(t, c.mustRun(Task, "submit", "sleep", "--entity", "e1", "--delay", "1h", "--json")).Ref()
	var listed struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(c.mustRun(Task, "list", "--json")), &listed); err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, raw := range listed.Tasks {
		refs = append(refs, refOf(t, string(raw)))
	}
	want := []string{ref, eref}
	slices.Sort(refs)
	slices.Sort(want)
	if !slices.Equal(refs, want) {
		t.Errorf("list --json: refs %q, want %q", refs, want)
	}
}

// s3Counter is a reverse proxy in front of the shared S3 that counts the
// requests by method: what a command costs, seen from outside.
type s3Counter struct {
	URL string
	mu  sync.Mutex
	n   map[string]int
}

func newS3Counter(t *testing.T) *s3Counter {
	target, err := url.Parse(testenv.SharedS3(t).Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	c := &s3Counter{n: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.n[r.Method]++
		c.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// take returns the counts so far and resets them.
func (c *s3Counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// TestTaskBareID: a bare id finds an entity's task, whose shard does not
// follow from its id, at the cost --help states (at most one HEAD per
// other shard, counted on the wire); an id of several tasks is refused,
// naming them, and a missing one is ErrNotFound.
func TestTaskBareID(t *testing.T) {
	c := newCLICluster(t, true)
	s3 := newS3Counter(t)
	env := []string{"USER=tester", "TENURE_S3_ENDPOINT=" + s3.URL}
	run := func(args ...string) (string, error) {
		t.Helper()
		out, _, err := runCmdEnv(t, c.cfgPath, env, Task, args...)
		return out, err
	}
	idShard := func(id string) int { return task.ShardOf("default", cliShards, "", "", id).Index }
	entityShard := func(entity string) int { return task.ShardOf("default", cliShards, "sleep", entity, "").Index }

	// An entity task whose shard is not its id's.
	id := "etask-0"
	for i := 1; idShard(id) == entityShard("acct 7"); i++ {
		id = fmt.Sprintf("etask-%d", i)
	}
	c.mustRun(Task, "submit", "sleep", "--id", id, "--entity", "acct 7", "--delay", "1h")
	s3.take()
	out, err := run("get", id, "--json")
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	if got, want := decodeTask(t, out).Ref(), fmt.Sprintf("default/%d/%s", entityShard("acct 7"), id); got != want {
		t.Errorf("get %s: %s, want %s", id, got, want)
	}
	if n := s3.take(); n["HEAD"] < 1 || n["HEAD"] > cliShards-1 || n["GET"] > 2 || len(n) > 2 {
		t.Errorf("get of an entity task by bare id made %v requests; want at most %d HEAD and 2 GET", n, cliShards-1)
	}
	out, err = run("cancel", id, "--json")
	if err != nil || decodeTask(t, out).Status != task.Cancelled {
		t.Errorf("cancel %s: %v\n%s", id, err, out)
	}

	// A task without entity costs no HEAD.
	plain := decodeTask(t, c.mustRun(Task, "submit", "echo", "--json"))
	s3.take()
	if out, err := run("get", plain.ID, "--json"); err != nil || decodeTask(t, out).Ref() != plain.Ref() {
		t.Errorf("get %s: %v", plain.ID, err)
	}
	if n := s3.take(); n["HEAD"] != 0 {
		t.Errorf("get of a task without entity by bare id made %v requests, want no HEAD", n)
	}

	// One id, two entities' tasks on two shards (neither the id's): refused.
	dup, a, b := "dup", "", ""
	for i := 0; a == "" || b == ""; i++ {
		e := fmt.Sprintf("acct %d", i)
		switch s := entityShard(e); {
		case s == idShard(dup):
		case a == "":
			a = e
		case s != entityShard(a):
			b = e
		}
	}
	refA := decodeTask(t, c.mustRun(Task, "submit", "sleep", "--id", dup, "--entity", a, "--delay", "1h", "--json")).Ref()
	refB := decodeTask(t, c.mustRun(Task, "submit", "sleep", "--id", dup, "--entity", b, "--delay", "1h", "--json")).Ref()
	for _, cmd := range []string{"get", "cancel"} {
		_, err := run(cmd, dup)
		assertOneLine(t, cmd+" of an ambiguous id", err, "task id dup names 2 tasks")
		if !errors.Is(err, errAmbiguousID) || !strings.Contains(err.Error(), refA) || !strings.Contains(err.Error(), refB) {
			t.Errorf("%s %s: err = %v, want errAmbiguousID naming %s and %s", cmd, dup, err, refA, refB)
		}
	}
	for _, ref := range []string{refA, refB} {
		if tk := decodeTask(t, c.mustRun(Task, "get", ref, "--json")); tk.Status != task.Pending {
			t.Errorf("%s after a refused cancel: %s", ref, tk.Status)
		}
	}

	// A missing id.
	s3.take()
	_, err = run("get", "nope")
	assertOneLine(t, "missing id", err, "task id nope is in no shard of group(s) default (8 shards each)")
	if !errors.Is(err, task.ErrNotFound) {
		t.Errorf("missing id: err = %v, want task.ErrNotFound", err)
	}
	if n := s3.take(); n["HEAD"] != cliShards-1 || n["GET"] != 1 {
		t.Errorf("a missing id made %v requests, want 1 GET and %d HEAD", n, cliShards-1)
	}
}
