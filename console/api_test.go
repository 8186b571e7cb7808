package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// TestSession: the session endpoint is open whatever the access rules,
// and says whether the request's credential is valid.
func TestSession(t *testing.T) {
	w := newWorld(t)
	w.deps.ProtectReads = true
	w.start()
	for _, tc := range []struct {
		token      string
		authorized bool
	}{{"", false}, {"wrong", false}, {testToken, true}} {
		code, _, b := w.do(http.MethodGet, "/ui/api/session", tc.token, "")
		var s sessionView
		if code != http.StatusOK || json.Unmarshal(b, &s) != nil {
			t.Fatalf("session with %q: %d %s", tc.token, code, b)
		}
		want := sessionView{AuthConfigured: true, ProtectReads: true, Authorized: tc.authorized, RunnerID: "r1", Cluster: "dev", Version: "v1"}
		if s != want {
			t.Errorf("session with token %q: %+v, want %+v", tc.token, s, want)
		}
	}
}

// TestAccessRules: shape views are open unless protect_reads, then they
// need the credential (401 with a Bearer challenge); user data and
// actions always need it, and a runner with none configured refuses them
// with 403 naming admin.token.
func TestAccessRules(t *testing.T) {
	shapes := []string{"/ui/api/cluster", "/ui/api/shards", "/ui/api/shards/default/0", "/ui/api/timeline", "/ui/api/schedules", "/ui/api/config"}
	secrets := []struct{ method, path, body string }{
		{http.MethodGet, "/ui/api/entities/counter/c1", ""},
		{http.MethodPost, "/ui/api/entities/counter/c1/add", `{"add":1}`},
		{http.MethodGet, "/ui/api/tasks", ""},
		{http.MethodGet, "/ui/api/tasks/default/3/t1", ""},
		{http.MethodPost, "/ui/api/tasks/default/3/t1/replay", ""},
		{http.MethodPost, "/ui/api/tasks/default/3/t1/cancel", ""},
		{http.MethodPut, "/ui/api/config", `{"set":{"detachment.mode":"observe"}}`},
		{http.MethodPost, "/ui/api/runners/r2/drain", ""},
	}

	t.Run("open reads", func(t *testing.T) {
		w := newWorld(t).start()
		for _, p := range shapes {
			if code, _, b := w.do(http.MethodGet, p, "", ""); code != http.StatusOK {
				t.Errorf("GET %s without a token: %d %s", p, code, b)
			}
		}
		for _, s := range secrets {
			w.wantError(s.method, s.path, "", s.body, http.StatusUnauthorized, CodeUnauthorized, "admin credential")
			w.wantError(s.method, s.path, "wrong", s.body, http.StatusUnauthorized, CodeUnauthorized, "Authorization: Bearer")
			if _, h, _ := w.do(s.method, s.path, "", s.body); !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s: 401 without a Bearer challenge", s.method, s.path)
			}
		}
		if len(w.peers.drained) != 0 || len(w.config.changes) != 0 || len(w.calls) != 0 {
			t.Errorf("refused actions ran: drained %v, changes %v, calls %v", w.peers.drained, w.config.changes, w.calls)
		}
	})
	t.Run("protect_reads", func(t *testing.T) {
		w := newWorld(t)
		w.deps.ProtectReads = true
		w.start()
		for _, p := range shapes {
			w.wantError(http.MethodGet, p, "", "", http.StatusUnauthorized, CodeUnauthorized, "protect_reads")
			if code, _, b := w.do(http.MethodGet, p, testToken, ""); code != http.StatusOK {
				t.Errorf("GET %s with the token: %d %s", p, code, b)
			}
		}
	})
	t.Run("no credential configured", func(t *testing.T) {
		w := newWorld(t)
		w.deps.Auth = fakeAuth{configured: false}
		w.start()
		for _, s := range secrets {
			w.wantError(s.method, s.path, testToken, s.body, http.StatusForbidden, CodeForbidden, "admin.token")
		}
		if code, _, _ := w.do(http.MethodGet, "/ui/api/cluster", "", ""); code != http.StatusOK {
			t.Errorf("a shape view without any credential configured: %d", code)
		}
	})
}

// TestUnknownEndpoint: a path or method the API does not serve is a JSON
// 404 naming it.
func TestUnknownEndpoint(t *testing.T) {
	w := newWorld(t).start()
	w.wantError(http.MethodGet, "/ui/api/nope", "", "", http.StatusNotFound, CodeNotFound, "/ui/api/nope")
	w.wantError(http.MethodDelete, "/ui/api/cluster", testToken, "", http.StatusNotFound, CodeNotFound, "DELETE")
}

// TestCluster: the cluster view counts the shards from etcd's locks,
// shows each runner's own answer, and nulls what an unreachable runner
// did not say.
func TestCluster(t *testing.T) {
	w := newWorld(t).start()
	var v struct {
		Cluster               string   `json:"cluster"`
		Shards                int      `json:"shards"`
		Groups                []string `json:"groups"`
		ConfigVersion         int64    `json:"config_version"`
		GeneratedAt           string   `json:"generated_at"`
		ServedBy              string   `json:"served_by"`
		ShardsOwned           int      `json:"shards_owned"`
		ShardsUnowned         int      `json:"shards_unowned"`
		ShardsHeldUnreachable int      `json:"shards_held_unreachable"`
		Runners               []map[string]any
	}
	w.get("/ui/api/cluster", &v)
	if v.Cluster != "dev" || v.Shards != 8 || !slices.Equal(v.Groups, []string{"default"}) || v.ConfigVersion != 3 ||
		v.ServedBy != "r1" || v.GeneratedAt != t0.Format(time.RFC3339Nano) {
		t.Errorf("cluster header: %+v", v)
	}
	if v.ShardsOwned != 7 || v.ShardsUnowned != 1 || v.ShardsHeldUnreachable != 1 {
		t.Errorf("shard counts: owned %d, unowned %d, held unreachable %d; want 7, 1, 1", v.ShardsOwned, v.ShardsUnowned, v.ShardsHeldUnreachable)
	}
	var ids []string
	for _, r := range v.Runners {
		ids = append(ids, r["id"].(string))
	}
	if !slices.Equal(ids, []string{"r1", "r2", "r3"}) {
		t.Fatalf("runners %v, want r1 r2 r3 in order", ids)
	}
	r1, r3 := v.Runners[0], v.Runners[2]
	for k, want := range map[string]any{"reachable": true, "attached": true, "mode": "enforce", "rollout_bucket": 37.0, "lease_left_seconds": 9.2,
		"shards_held": 3.0, "resident_entities": 5.0, "calls_per_second": 12.5, "tasks_per_second": 3.1, "config_version": 3.0,
		"weight": 1.0, "draining": false, "status_error": "", "addr": "10.0.0.1:9310", "started_at": t0.Add(-time.Hour).Format(time.RFC3339Nano)} {
		if r1[k] != want {
			t.Errorf("r1 %s = %v (%T), want %v", k, r1[k], r1[k], want)
		}
	}
	if types, _ := r1["types"].([]any); len(types) != 1 || types[0] != "counter" {
		t.Errorf("r1 types %v", r1["types"])
	}
	for _, k := range []string{"attached", "lease_left_seconds", "mode", "config_version", "resident_entities", "calls_per_second", "tasks_per_second", "rollout_bucket"} {
		if v, ok := r3[k]; !ok || v != nil {
			t.Errorf("unreachable r3: %s = %v (present %v), want null", k, v, ok)
		}
	}
	if r3["reachable"] != false || !strings.Contains(r3["status_error"].(string), "connection refused") || r3["shards_held"] != 1.0 {
		t.Errorf("unreachable r3: %v", r3)
	}
}

// TestClusterNotInitialised: before any runner wrote the cluster meta,
// the views answer 503 saying so.
func TestClusterNotInitialised(t *testing.T) {
	w := newWorld(t)
	w.store.meta = storage.ClusterMeta{}
	w.start()
	w.wantError(http.MethodGet, "/ui/api/cluster", "", "", http.StatusServiceUnavailable, CodeUnavailable, "not initialised")
}

// TestShards: every shard of every group, with its holder (from etcd),
// its assigned runner (the placement of the live runners and holders),
// and its state: unowned without a lock, unreachable when the holder does
// not answer, moving when the holder is not the assigned runner or
// drains, owned otherwise.
func TestShards(t *testing.T) {
	w := newWorld(t)
	w.peers.status["r2"]["draining"] = true
	w.start()
	var v struct {
		Groups []struct {
			Name   string
			Shards []shardCell
		}
		Runners     []string
		GeneratedAt string `json:"generated_at"`
	}
	w.get("/ui/api/shards", &v)
	if len(v.Groups) != 1 || v.Groups[0].Name != "default" || len(v.Groups[0].Shards) != 8 || !slices.Equal(v.Runners, []string{"r1", "r2", "r3"}) {
		t.Fatalf("shards view: %+v", v)
	}
	// The assignment the runners compute: r2 drains (weight 0).
	holders := placement.Assignment{}
	for _, l := range w.store.locks {
		holders[l.Shard] = l.RunnerID
	}
	want := placement.ProcedureV2.Reassign([]string{"default"}, 8,
		[]placement.Candidate{{ID: "r1", Weight: 1}, {ID: "r2", Weight: 0}, {ID: "r3", Weight: 1}}, holders)
	held := map[string]int{}
	for i, c := range v.Groups[0].Shards {
		s := shardID(i)
		if c.Index != i || c.ID != s.String() || c.Assigned != want[s] {
			t.Errorf("shard %d: %+v, want assigned %q", i, c, want[s])
		}
		wantState := ShardOwned
		switch {
		case i == 7:
			wantState = ShardUnowned
		case i == 6:
			wantState = ShardUnreachable
		case i >= 3 || c.Holder != c.Assigned:
			wantState = ShardMoving
		}
		if c.State != wantState {
			t.Errorf("shard %d (holder %q, assigned %q): state %s, want %s", i, c.Holder, c.Assigned, c.State, wantState)
		}
		if c.Holder != "" {
			held[c.Holder]++
			if c.Epoch != int64(100+i) {
				t.Errorf("shard %d: epoch %d", i, c.Epoch)
			}
		}
	}
	if held["r1"] != 3 || held["r2"] != 3 || held["r3"] != 1 {
		t.Errorf("holder counts %v: want the etcd locks per runner (3, 3, 1)", held)
	}
}

// TestShardDetail: one shard with its lock history and, for a request
// with the credential, the holder's resident entities; without it, or
// when the holder does not answer, resident is null and resident_error
// says why. A bad group or index is a 400 naming it.
func TestShardDetail(t *testing.T) {
	w := newWorld(t).start()
	type detail struct {
		ID            string `json:"id"`
		Holder        string `json:"holder"`
		Epoch         int64  `json:"epoch"`
		State         string `json:"state"`
		History       []map[string]any
		Resident      []map[string]string `json:"resident"`
		ResidentError string              `json:"resident_error"`
	}
	var d detail
	w.get("/ui/api/shards/default/0", &d)
	if d.ID != "default/0" || d.Holder != "r1" || d.Epoch != 100 || len(d.History) != 1 || d.History[0]["event"] != "acquired" ||
		len(d.Resident) != 1 || d.Resident[0]["id"] != "c1" || d.ResidentError != "" {
		t.Errorf("shard detail with the credential: %+v", d)
	}
	code, _, b := w.do(http.MethodGet, "/ui/api/shards/default/0", "", "")
	var anon map[string]any
	if code != http.StatusOK || json.Unmarshal(b, &anon) != nil || anon["resident"] != nil || !strings.Contains(anon["resident_error"].(string), "credential") {
		t.Errorf("shard detail without the credential: %d %s", code, b)
	}
	var d6 map[string]any
	w.get("/ui/api/shards/default/6", &d6)
	if d6["resident"] != nil || !strings.Contains(d6["resident_error"].(string), "connection refused") || d6["state"] != ShardUnreachable {
		t.Errorf("shard of an unreachable holder: %v", d6)
	}
	var d7 map[string]any
	w.get("/ui/api/shards/default/7", &d7)
	if d7["holder"] != "" || d7["state"] != ShardUnowned || d7["resident"] != nil || d7["resident_error"] == "" {
		t.Errorf("unowned shard: %v", d7)
	}
	w.wantError(http.MethodGet, "/ui/api/shards/nope/0", "", "", http.StatusBadRequest, CodeBadRequest, "group")
	w.wantError(http.MethodGet, "/ui/api/shards/default/8", "", "", http.StatusBadRequest, CodeBadRequest, "index")
	w.wantError(http.MethodGet, "/ui/api/shards/default/x", "", "", http.StatusBadRequest, CodeBadRequest, "index")
}

// TestTimeline: every live runner's events on one time axis since the
// given time (15 minutes by default); an unreachable runner is listed
// with its error; a bad since is a 400 naming it.
func TestTimeline(t *testing.T) {
	w := newWorld(t).start()
	var v struct {
		Events  []Event
		Runners []timelineRunner
		Since   string `json:"since"`
	}
	w.get("/ui/api/timeline", &v)
	var got []string
	for _, e := range v.Events {
		got = append(got, e.Runner+":"+string(e.Kind))
	}
	// r2's start is an hour old: outside the default window.
	if want := []string{"r1:started", "r2:keepalive_failed", "r1:detached"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if v.Since != t0.Add(-DefaultTimelineWindow).Format(time.RFC3339Nano) {
		t.Errorf("since %s", v.Since)
	}
	if len(v.Runners) != 3 || !v.Runners[0].Reachable || v.Runners[2].Reachable || !strings.Contains(v.Runners[2].Error, "refused") {
		t.Errorf("runners %+v", v.Runners)
	}
	if v.Events[2].Reason != "lease-deadline" || v.Events[2].Generation != 3 {
		t.Errorf("detach event %+v", v.Events[2])
	}
	w.get("/ui/api/timeline?since="+t0.Add(-2*time.Hour).Format(time.RFC3339), &v)
	if len(v.Events) != 4 || v.Events[0].Kind != EventStarted || v.Events[0].Runner != "r2" {
		t.Errorf("since 2h: %+v", v.Events)
	}
	w.wantError(http.MethodGet, "/ui/api/timeline?since=yesterday", "", "", http.StatusBadRequest, CodeBadRequest, "since")

	// r1's registration ends (cut off from etcd, its lease gone) while it
	// still answers: its events stay on the timeline, marked.
	w.store.runners = slices.DeleteFunc(w.store.runners, func(r storage.RunnerInfo) bool { return r.ID == "r1" })
	w.get("/ui/api/timeline", &v)
	got = got[:0]
	for _, e := range v.Events {
		got = append(got, e.Runner+":"+string(e.Kind))
	}
	if want := []string{"r1:started", "r2:keepalive_failed", "r1:detached"}; !slices.Equal(got, want) {
		t.Errorf("after r1's registration ended: events %v, want %v", got, want)
	}
	if len(v.Runners) != 3 || v.Runners[0].ID != "r1" || v.Runners[0].Registered || !v.Runners[1].Registered {
		t.Errorf("after r1's registration ended: runners %+v, want r1 not registered, the others registered", v.Runners)
	}
}

// TestEntityLookup: an entity's shard, holder, residency, state,
// reminders and operations; without state, state is null; an empty or
// bad type or id is a 400 naming it.
func TestEntityLookup(t *testing.T) {
	w := newWorld(t)
	// Put counter/c1's shard on r1 whatever it is.
	sh := task.ShardOf("default", 8, "counter", "c1", "")
	w.store.locks = slices.DeleteFunc(w.store.locks, func(l storage.ShardLock) bool { return l.Shard == sh })
	w.store.locks = append(w.store.locks, storage.ShardLock{Shard: sh, RunnerID: "r1", Epoch: 100})
	w.start()
	var v map[string]any
	w.get("/ui/api/entities/counter/c1", &v)
	st, _ := v["state"].(map[string]any)
	if v["shard"] != sh.String() || v["runner"] != "r1" || v["group"] != "default" || v["resident"] != true || st == nil {
		t.Fatalf("entity: %v", v)
	}
	if js, _ := json.Marshal(st["json"]); string(js) != `{"total":4}` || st["rev"] != 4.0 || st["epoch"] != 100.0 || st["writer"] != "r1" ||
		st["size"] != 11.0 || st["saved_at"] != t0.Format(time.RFC3339Nano) {
		t.Errorf("state %v", st)
	}
	if ops, _ := v["operations"].([]any); len(ops) != 2 || ops[0] != "add" {
		t.Errorf("operations %v", v["operations"])
	}
	if rs, _ := v["reminders"].([]any); len(rs) != 1 {
		t.Errorf("reminders %v", v["reminders"])
	}
	w.get("/ui/api/entities/counter/none", &v)
	if v["state"] != nil || v["state_error"] != "" {
		t.Errorf("entity without state: state %v, state_error %v", v["state"], v["state_error"])
	}
	w.wantError(http.MethodGet, "/ui/api/entities/bad%20type/c1", testToken, "", http.StatusBadRequest, CodeBadRequest, "type")
	w.wantError(http.MethodGet, "/ui/api/entities/counter/c1?group=nope", testToken, "", http.StatusBadRequest, CodeBadRequest, "group")
	w.wantError(http.MethodGet, "/ui/api/entities/counter/%01", testToken, "", http.StatusBadRequest, CodeBadRequest, "id")
}

// TestEntityCall: a call's output, runner and time; a bad body or
// operation is a 400 naming it; a failed call answers with the call's
// status and code.
func TestEntityCall(t *testing.T) {
	w := newWorld(t).start()
	code, _, b := w.do(http.MethodPost, "/ui/api/entities/counter/c1/add", testToken, `{"add":1}`)
	var r callReply
	if code != http.StatusOK || json.Unmarshal(b, &r) != nil || string(r.Output) != `{"total":5}` || r.TookMS < 0 {
		t.Fatalf("call: %d %s", code, b)
	}
	if len(w.calls) != 1 || w.calls[0].Type != "counter" || w.calls[0].ID != "c1" || w.calls[0].Op != "add" || string(w.calls[0].Body) != `{"add":1}` {
		t.Errorf("the call made: %+v", w.calls)
	}
	if code, _, b := w.do(http.MethodPost, "/ui/api/entities/counter/c1", testToken, ""); code != http.StatusOK || len(w.calls) != 2 || w.calls[1].Op != "" {
		t.Errorf("a call of the default operation with no body: %d %s", code, b)
	}
	w.wantError(http.MethodPost, "/ui/api/entities/counter/c1/add", testToken, `{not json`, http.StatusBadRequest, CodeBadRequest, "body")
	w.wantError(http.MethodPost, "/ui/api/entities/counter/c1/9op", testToken, `{}`, http.StatusBadRequest, CodeBadRequest, "op")

	failing := newWorld(t)
	failing.deps.Call = func(context.Context, *entity.Message) ([]byte, error) {
		return nil, fmt.Errorf("entity type \"nope\": %w", messaging.ErrTypeNotHosted)
	}
	failing.start()
	code, _, b = failing.do(http.MethodPost, "/ui/api/entities/nope/x/get", testToken, "")
	var e messaging.ErrorBody
	if code != http.StatusNotFound || json.Unmarshal(b, &e) != nil || e.Code != "type_not_hosted" || !strings.Contains(e.Error, "nope") {
		t.Errorf("a failed call: %d %s; want 404 type_not_hosted", code, b)
	}
}

// taskAt makes a task of the world's cluster.
func taskAt(id, typ, entity string, status task.Status, created time.Time) *task.Task {
	return &task.Task{ID: id, Type: typ, Entity: entity, Status: status, Attempt: 1, CreatedAt: created, UpdatedAt: created,
		Shard: task.ShardOf("default", 8, typ, entity, id)}
}

// TestTasks: the task list with its filters (status and type by the
// listing, entity and age here), a task's detail as `tenure task get -o
// json` prints it, replay and cancel, and the errors: a bad filter is a
// 400 naming it, a missing task 404, a refused change 409.
func TestTasks(t *testing.T) {
	w := newWorld(t)
	w.tasks.tasks = []*task.Task{
		taskAt("t1", "echo", "", task.Pending, t0.Add(-time.Minute)),
		taskAt("t2", "echo", "e1", task.Failed, t0.Add(-time.Hour)),
		taskAt("t3", "sleep", "e1", task.Completed, t0.Add(-10*time.Second)),
	}
	w.start()
	list := func(query string) []string {
		t.Helper()
		var v taskListView
		w.get("/ui/api/tasks"+query, &v)
		var ids []string
		for _, r := range v.Tasks {
			ids = append(ids, r.ID)
		}
		return ids
	}
	for query, want := range map[string][]string{
		"":                                   {"t1", "t2", "t3"},
		"?status=failed":                     {"t2"},
		"?type=echo":                         {"t1", "t2"},
		"?entity=e1":                         {"t2", "t3"},
		"?older_than=120":                    {"t2"},
		"?type=echo&entity=e1&group=default": {"t2"},
	} {
		if got := list(query); !slices.Equal(got, want) {
			t.Errorf("tasks%s: %v, want %v", query, got, want)
		}
	}
	var v taskListView
	w.get("/ui/api/tasks?status=pending", &v)
	if len(v.Tasks) != 1 || v.Tasks[0].Ref != w.tasks.tasks[0].Ref() || v.Tasks[0].AgeSeconds != 60 || v.Tasks[0].Status != "pending" ||
		v.Tasks[0].CreatedAt != t0.Add(-time.Minute).Format(time.RFC3339Nano) {
		t.Errorf("a task row: %+v", v.Tasks)
	}
	if o := w.tasks.opts[len(w.tasks.opts)-1]; o.Limit != DefaultTaskLimit || o.Status != task.Pending {
		t.Errorf("list options %+v", o)
	}
	for _, bad := range []struct{ query, field string }{
		{"?status=lost", "status"}, {"?type=a%20b", "type"}, {"?older_than=-1", "older_than"},
		{"?limit=0", "limit"}, {"?limit=100000", "limit"}, {"?group=nope", "group"},
	} {
		w.wantError(http.MethodGet, "/ui/api/tasks"+bad.query, testToken, "", http.StatusBadRequest, CodeBadRequest, bad.field)
	}

	ref := w.tasks.tasks[1].Ref()
	var got map[string]any
	w.get("/ui/api/tasks/"+ref, &got)
	if got["ref"] != ref || got["id"] != "t2" || got["status"] != "failed" {
		t.Errorf("task detail: %v", got)
	}
	if b, _ := json.Marshal(task.WithRef{T: w.tasks.tasks[1]}); !strings.HasPrefix(string(b), `{"ref":"`+ref+`",`) {
		t.Errorf("task JSON does not start with its ref: %s", b)
	}
	code, _, b := w.do(http.MethodPost, "/ui/api/tasks/"+ref+"/replay", testToken, "")
	if code != http.StatusOK || !strings.Contains(string(b), `"status":"pending"`) {
		t.Errorf("replay: %d %s", code, b)
	}
	w.wantError(http.MethodPost, "/ui/api/tasks/"+w.tasks.tasks[2].Ref()+"/cancel", testToken, "", http.StatusConflict, CodeConflict, "terminal")
	w.wantError(http.MethodGet, "/ui/api/tasks/default/3/missing", testToken, "", http.StatusNotFound, CodeNotFound, "missing")
	w.wantError(http.MethodGet, "/ui/api/tasks/default/x/t1", testToken, "", http.StatusBadRequest, CodeBadRequest, "ref")
}

// TestSchedules: the schedules of every group with their next tick, and
// the singletons as their runners report them.
func TestSchedules(t *testing.T) {
	w := newWorld(t).start()
	var v struct {
		Schedules  []map[string]any
		Singletons []singletonRow
		Errors     []string
	}
	w.get("/ui/api/schedules", &v)
	if len(v.Schedules) != 1 || v.Schedules[0]["name"] != "nightly" || v.Schedules[0]["next"] != t0.Add(15*time.Hour).Format(time.RFC3339Nano) ||
		v.Schedules[0]["tz"] != "UTC" || v.Schedules[0]["paused"] != false || v.Schedules[0]["catch_up"] != "all" {
		t.Errorf("schedules: %v", v.Schedules)
	}
	var row scheduleRow
	if b, _ := json.Marshal(v.Schedules[0]); json.Unmarshal(b, &row) != nil || row.Last == nil ||
		row.Last.Tick != t0.Add(-9*time.Hour) || row.Last.Result.Outcome != "on_time" || row.Missed == nil || *row.Missed != 2 ||
		*row.Late != 1 || row.RunsRead != 2 || row.Waiting != t0.Add(15*time.Hour).Format(time.RFC3339Nano) || row.Stopped != "" || row.HistErr != "" {
		t.Errorf("schedule history: %+v", row)
	}
	if len(v.Singletons) != 2 || v.Singletons[0].Runner != "r1" || v.Singletons[1].Runner != "r2" || v.Singletons[0].Type != "leader" {
		t.Errorf("singletons: %+v", v.Singletons)
	}
	if len(v.Errors) != 1 || !strings.Contains(v.Errors[0], "r3") {
		t.Errorf("errors: %v, want r3's", v.Errors)
	}
}

// TestScheduleHistoriesBounded: GET schedules reads the histories of its
// first maxHistories schedules (the others say why they have none), and
// shows a history again for historyReuse before it reads it anew.
func TestScheduleHistoriesBounded(t *testing.T) {
	w := newWorld(t)
	sc := &countedSchedules{}
	for i := range maxHistories + 5 {
		name := fmt.Sprintf("s%03d", i)
		sc.fakeSchedules = append(sc.fakeSchedules, &schedule.Schedule{Name: name, Cron: "@hourly", Type: "echo",
			CatchUp: schedule.CatchUpSkip, Generation: 1, Shard: schedule.ShardOf(storage.DefaultGroup, 8, name)})
	}
	w.deps.Schedules = func(string) (Schedules, error) { return sc, nil }
	var now atomic.Pointer[time.Time]
	now.Store(&t0)
	w.deps.Now = func() time.Time { return *now.Load() }
	w.start()
	var v struct{ Schedules []scheduleRow }
	w.get("/ui/api/schedules", &v)
	if len(v.Schedules) != maxHistories+5 || sc.reads.Load() != maxHistories {
		t.Fatalf("%d rows, %d histories read, want %d and %d", len(v.Schedules), sc.reads.Load(), maxHistories+5, maxHistories)
	}
	for i, row := range v.Schedules {
		if read := i < maxHistories; read != (row.Missed != nil) || read != (row.HistErr == "") {
			t.Fatalf("row %d: missed %v, history error %q", i, row.Missed, row.HistErr)
		}
	}
	w.get("/ui/api/schedules", &v)
	if n := sc.reads.Load(); n != maxHistories {
		t.Fatalf("%d histories read after a refresh within %s, want none more", n-maxHistories, historyReuse)
	}
	later := t0.Add(historyReuse)
	now.Store(&later)
	w.get("/ui/api/schedules", &v)
	if n := sc.reads.Load(); n != 2*maxHistories {
		t.Fatalf("%d histories read after %s, want %d", n, historyReuse, 2*maxHistories)
	}
}

// TestConfigEndpoints: GET config is the service's view; PUT config
// checks the body (400 naming the field), passes the change on, and
// answers a refusal with the service's status and code.
func TestConfigEndpoints(t *testing.T) {
	w := newWorld(t).start()
	var v ConfigView
	w.get("/ui/api/config", &v)
	if v.Version != 3 || v.Revision != 812 {
		t.Errorf("config view %+v", v)
	}
	code, _, b := w.do(http.MethodPut, "/ui/api/config", testToken, `{"set":{"detachment.mode":"observe"},"rollout_percent":20}`)
	if code != http.StatusOK || len(w.config.changes) != 1 {
		t.Fatalf("PUT config: %d %s", code, b)
	}
	if c := w.config.changes[0]; c.Set["detachment.mode"] != "observe" || *c.RolloutPercent != 20 || c.By != "console@r1" {
		t.Errorf("change passed on: %+v", c)
	}
	for _, bad := range []struct{ body, field string }{
		{`{"set":`, "body"}, {`{"sett":{}}`, "body"}, {`{}`, "nothing to change"},
		{`{"rollout_percent":101}`, "rollout_percent"}, {`{"set":{"a":"1"},"unset":["a"]}`, "unset"},
	} {
		w.wantError(http.MethodPut, "/ui/api/config", testToken, bad.body, http.StatusBadRequest, CodeBadRequest, bad.field)
	}
	w.config.err = NewError(http.StatusConflict, "refused", errors.New("refused, nothing written: runner r2 refuses detachment.margin"))
	w.wantError(http.MethodPut, "/ui/api/config", testToken, `{"set":{"detachment.margin":"9s"}}`, http.StatusConflict, "refused", "detachment.margin")
}

// TestDrain: a drain goes to the named live runner; an unknown one is a
// 404, one that does not answer a 503.
func TestDrain(t *testing.T) {
	w := newWorld(t).start()
	code, _, b := w.do(http.MethodPost, "/ui/api/runners/r2/drain", testToken, "")
	var r drainReply
	if code != http.StatusAccepted || json.Unmarshal(b, &r) != nil || r != (drainReply{Runner: "r2", Draining: true}) || !slices.Equal(w.peers.drained, []string{"r2"}) {
		t.Errorf("drain r2: %d %s, drained %v", code, b, w.peers.drained)
	}
	w.wantError(http.MethodPost, "/ui/api/runners/r9/drain", testToken, "", http.StatusNotFound, CodeNotFound, "r9")
	w.wantError(http.MethodPost, "/ui/api/runners/r3/drain", testToken, "", http.StatusServiceUnavailable, CodeUnavailable, "r3")
}

// TestNotRunning: an endpoint whose dependency the runner has not made
// yet answers 503 not_available.
func TestNotRunning(t *testing.T) {
	w := newWorld(t)
	w.deps.Tasks, w.deps.States, w.deps.Call, w.deps.Config = nil, nil, nil, nil
	w.start()
	w.wantError(http.MethodGet, "/ui/api/tasks", testToken, "", http.StatusServiceUnavailable, CodeNotAvailable, "tasks")
	w.wantError(http.MethodGet, "/ui/api/entities/counter/c1", testToken, "", http.StatusServiceUnavailable, CodeNotAvailable, "state")
	w.wantError(http.MethodGet, "/ui/api/config", testToken, "", http.StatusServiceUnavailable, CodeNotAvailable, "config")
}

// TestNewChecksDeps: New refuses a Deps without its required parts.
func TestNewChecksDeps(t *testing.T) {
	w := newWorld(t)
	for name, d := range map[string]Deps{
		"no runner id": {Store: w.store, Peers: w.peers, Auth: fakeAuth{}},
		"no store":     {RunnerID: "r1", Peers: w.peers, Auth: fakeAuth{}},
		"no auth":      {RunnerID: "r1", Store: w.store, Peers: w.peers},
	} {
		if _, err := New(d); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// TestTimelineRing: a timeline keeps the last size events in order,
// stamps the runner, filters by time, and serves them as JSON.
func TestTimelineRing(t *testing.T) {
	tl := NewTimeline("r1", 5)
	for i := range 8 {
		tl.Add(Event{At: t0.Add(time.Duration(i) * time.Second), Kind: EventDetached, Generation: uint64(i)})
	}
	all := tl.Since(time.Time{})
	var gens []uint64
	for _, e := range all {
		gens = append(gens, e.Generation)
		if e.Runner != "r1" {
			t.Errorf("event %+v: runner not stamped", e)
		}
	}
	if !slices.Equal(gens, []uint64{3, 4, 5, 6, 7}) {
		t.Errorf("ring of 5 after 8: generations %v", gens)
	}
	if got := tl.Since(t0.Add(6 * time.Second)); len(got) != 2 || got[0].Generation != 6 {
		t.Errorf("since 6s: %+v", got)
	}
	tl.Add(Event{Kind: EventStarted}) // stamped now
	if got := tl.Since(time.Now().Add(-time.Minute)); len(got) != 1 || got[0].Kind != EventStarted {
		t.Errorf("an event without a time is stamped now: %+v", got)
	}

	srv := newWorld(t)
	mux := http.NewServeMux()
	mux.Handle("GET /debug/timeline", TimelineHandler(tl))
	srv.srv = httptestServer(t, mux)
	var reply TimelineReply
	srv.get("/debug/timeline?since="+t0.Add(7*time.Second).Format(time.RFC3339), &reply)
	if reply.Runner != "r1" || len(reply.Events) != 2 || reply.Events[0].Generation != 7 {
		t.Errorf("GET /debug/timeline: %+v", reply)
	}
	srv.wantError(http.MethodGet, "/debug/timeline?since=x", "", "", http.StatusBadRequest, CodeBadRequest, "since")
}

// TestDecodeStatus: a status is decoded field by field: a malformed or
// absent field is left out, the rest kept.
func TestDecodeStatus(t *testing.T) {
	st, err := DecodeStatus([]byte(`{"runner_id":"r1","attached":"yes","owned":3,"calls_per_second":1.5,"types":["a"],"extra":{}}`))
	if err != nil || st.RunnerID != "r1" || st.Attached != nil || *st.Owned != 3 || *st.CallsPerSecond != 1.5 || st.ResidentEntities != nil || !slices.Equal(st.Types, []string{"a"}) {
		t.Errorf("DecodeStatus: %+v, %v", st, err)
	}
	if _, err := DecodeStatus([]byte(`[1]`)); err == nil {
		t.Error("a status that is no object decoded")
	}
}
