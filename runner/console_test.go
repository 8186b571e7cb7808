package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

const consoleToken = "console-test-token"

// consoleDo makes a request to a runner's admin server (token "" sends
// none) and returns the status and the body.
func consoleDo(t *testing.T, x *running, method, path, token, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+x.r.AdminAddr()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// consoleGet is a GET with the token that must answer 200, decoded into v.
func consoleGet(t *testing.T, x *running, path string, v any) {
	t.Helper()
	code, b := consoleDo(t, x, http.MethodGet, path, consoleToken, "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

// clusterJSON is what the tests read of GET /ui/api/cluster.
type clusterJSON struct {
	ShardsOwned int `json:"shards_owned"`
	Runners     []struct {
		ID               string   `json:"id"`
		Reachable        bool     `json:"reachable"`
		Attached         *bool    `json:"attached"`
		ShardsHeld       int      `json:"shards_held"`
		ConfigVersion    *int64   `json:"config_version"`
		RolloutBucket    *int     `json:"rollout_bucket"`
		ResidentEntities *int     `json:"resident_entities"`
		CallsPerSecond   *float64 `json:"calls_per_second"`
	} `json:"runners"`
}

// TestConsoleOnCluster: on three real runners (embedded etcd and S3),
// the console's API served by one of them shows the whole cluster:
// every runner attached, the shard holders as etcd's locks say; a task
// submitted is listed and readable with the admin token and refused
// without; a counter called through the console shows its state; a
// config change is refused naming the key (on its own, or by the
// runners) and applied by every runner when valid; a drain through the
// console moves the runner's shards away.
func TestConsoleOnCluster(t *testing.T) {
	c := newTestCluster(t)
	extra := []string{"admin.token=" + consoleToken}
	counter := WithEntities(CounterDefinition(TypeCounter))
	xs := []*running{c.startWith("k1", extra, counter), c.startWith("k2", extra, counter), c.startWith("k3", extra, counter)}
	x := xs[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := c.store()

	var cl clusterJSON
	testenv.WaitFor(t, "every runner attached, every shard held", 20*time.Second, func() bool {
		consoleGet(t, x, "/ui/api/cluster", &cl)
		if len(cl.Runners) != 3 || cl.ShardsOwned != 8 {
			return false
		}
		for _, r := range cl.Runners {
			if !r.Reachable || r.Attached == nil || !*r.Attached {
				return false
			}
		}
		return true
	})
	for _, r := range cl.Runners {
		if r.RolloutBucket == nil || *r.RolloutBucket != RolloutBucket(r.ID) || r.ResidentEntities == nil {
			t.Errorf("runner %s in the cluster view: %+v", r.ID, r)
		}
	}

	// Shard holders: the counts per runner are etcd's locks per runner.
	testenv.WaitFor(t, "the shards view's holders to match etcd's locks", 10*time.Second, func() bool {
		var v struct {
			Groups []struct {
				Shards []struct{ Holder, State string }
			}
		}
		consoleGet(t, x, "/ui/api/shards", &v)
		locks, _, err := rs.ShardLocks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want, got := map[string]int{}, map[string]int{}
		for _, l := range locks {
			want[l.RunnerID]++
		}
		for _, s := range v.Groups[0].Shards {
			if s.Holder != "" {
				got[s.Holder]++
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(want) && len(locks) == 8
	})

	// A task, listed and read with the token, refused without.
	client, err := x.r.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tk, _, err := client.Submit(ctx, task.SubmitRequest{Type: "echo", Input: json.RawMessage(`{"hello":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Tasks []struct{ Ref, Status string }
	}
	consoleGet(t, x, "/ui/api/tasks?type=echo", &list)
	if len(list.Tasks) != 1 || list.Tasks[0].Ref != tk.Ref() {
		t.Errorf("task list: %+v, want %s", list, tk.Ref())
	}
	var detail map[string]any
	consoleGet(t, x, "/ui/api/tasks/"+tk.Ref(), &detail)
	if detail["ref"] != tk.Ref() || detail["type"] != "echo" {
		t.Errorf("task detail: %v", detail)
	}
	if code, b := consoleDo(t, x, http.MethodGet, "/ui/api/tasks/"+tk.Ref(), "", ""); code != http.StatusUnauthorized {
		t.Errorf("task detail without the token: %d %s, want 401", code, b)
	}
	if code, _ := consoleDo(t, x, http.MethodGet, "/ui/api/tasks", "", ""); code != http.StatusUnauthorized {
		t.Errorf("task list without the token: %d, want 401", code)
	}

	// A counter called through the console, then looked up.
	code, b := consoleDo(t, x, http.MethodPost, "/ui/api/entities/counter/k-1/add", consoleToken, `{"add":3}`)
	if code != http.StatusOK || !strings.Contains(string(b), `"output":{"total":3}`) {
		t.Fatalf("call through the console: %d %s", code, b)
	}
	var ent struct {
		Runner     string
		Operations []string
		State      *struct {
			JSON json.RawMessage `json:"json"`
			Rev  int64
		}
	}
	consoleGet(t, x, "/ui/api/entities/counter/k-1", &ent)
	if ent.State == nil || !bytes.Equal(compactJSON(t, ent.State.JSON), []byte(`{"total":3}`)) || ent.Runner == "" ||
		fmt.Sprint(ent.Operations) != "[add get]" {
		t.Errorf("entity lookup after the call: %+v", ent)
	}

	// Config: an unknown key is refused on its own (400), a margin the
	// runners' 2s lease cannot take by the runners (409), both naming the
	// key and writing nothing; a valid change is applied by every runner.
	code, b = consoleDo(t, x, http.MethodPut, "/ui/api/config", consoleToken, `{"set":{"detachment.nope":"1"}}`)
	if code != http.StatusBadRequest || !strings.Contains(string(b), "detachment.nope") {
		t.Errorf("an unknown key: %d %s, want 400 naming it", code, b)
	}
	code, b = consoleDo(t, x, http.MethodPut, "/ui/api/config", consoleToken, `{"set":{"detachment.margin":"1900ms"}}`)
	if code != http.StatusConflict || !strings.Contains(string(b), "detachment.margin") || !strings.Contains(string(b), "runner k") {
		t.Errorf("a margin the runners refuse: %d %s, want 409 naming the key and a runner", code, b)
	}
	if cv, err := rs.Config(ctx); err != nil || cv.Value != nil {
		t.Fatalf("a refused change wrote %s (%v)", cv.Value, err)
	}
	code, b = consoleDo(t, x, http.MethodPut, "/ui/api/config", consoleToken, `{"set":{"detachment.recover_window":"700ms"}}`)
	var cfgView struct {
		Version int64
		Runners []struct {
			ID             string
			AppliedVersion *int64 `json:"applied_version"`
		}
	}
	if code != http.StatusOK || json.Unmarshal(b, &cfgView) != nil || cfgView.Version != 1 || len(cfgView.Runners) != 3 {
		t.Fatalf("a valid change: %d %s", code, b)
	}
	for _, y := range xs {
		testenv.WaitFor(t, y.r.cfg.RunnerID+" applying version 1", 10*time.Second, func() bool {
			st := y.status(t)
			return st.ConfigVersion == 1 && st.ConfigError == ""
		})
	}

	// A drain through the console (served by k1, for k3) moves k3's
	// shards away.
	if code, b := consoleDo(t, x, http.MethodPost, "/ui/api/runners/k3/drain", consoleToken, ""); code != http.StatusAccepted {
		t.Fatalf("drain k3 through the console: %d %s", code, b)
	}
	testenv.WaitFor(t, "k3's shards moved away", 20*time.Second, func() bool {
		locks, _, err := rs.ShardLocks(ctx)
		if err != nil {
			return false
		}
		for _, l := range locks {
			if l.RunnerID == "k3" {
				return false
			}
		}
		return len(locks) == 8
	})
	if !xs[2].status(t).Draining {
		t.Error("k3 does not say it drains")
	}
	var tl struct {
		Events []struct{ Runner, Kind string }
	}
	consoleGet(t, x, "/ui/api/timeline", &tl)
	seen := map[string]bool{}
	for _, e := range tl.Events {
		seen[e.Runner+":"+e.Kind] = true
	}
	for _, want := range []string{"k1:started", "k2:started", "k3:started", "k1:attached", "k3:draining"} {
		if !seen[want] {
			t.Errorf("the merged timeline lacks %s: %v", want, tl.Events)
		}
	}
}

func compactJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return out.Bytes()
}

// TestTimelineShowsPartition: a runner cut off from etcd detaches, and
// its GET /debug/timeline shows the keep-alive failing and the detach
// (with its reason), then the attach once the partition heals.
func TestTimelineShowsPartition(t *testing.T) {
	c := newTestCluster(t)
	x := c.start("part")
	testenv.WaitFor(t, "attached", 10*time.Second, func() bool { return x.status(t).Attached })
	x.proxy.SetMode(testenv.Blackhole)
	type events struct {
		Runner string
		Events []struct {
			Kind, Reason, Detail string
			Generation           uint64
		}
	}
	has := func(kind string) func() bool {
		return func() bool {
			var tl events
			code, b := x.get(t, "/debug/timeline")
			if code != http.StatusOK || json.Unmarshal(b, &tl) != nil {
				t.Fatalf("/debug/timeline: %d %s", code, b)
			}
			for _, e := range tl.Events {
				if e.Kind == kind && (kind != "detached" || e.Reason != "") {
					return true
				}
			}
			return false
		}
	}
	testenv.WaitFor(t, "a detach in the timeline", 15*time.Second, has("detached"))
	if !has("keepalive_failed")() {
		t.Error("the timeline lacks the failing keep-alive that led to the detach")
	}
	x.proxy.SetMode(testenv.Pass)
	testenv.WaitFor(t, "the attach after the partition", 20*time.Second, func() bool {
		var tl events
		_, b := x.get(t, "/debug/timeline")
		_ = json.Unmarshal(b, &tl)
		detached := false
		for _, e := range tl.Events {
			switch e.Kind {
			case "detached":
				detached = true
			case "attached":
				if detached {
					return true
				}
			}
		}
		return false
	})
}

// TestProtectReads: with admin.protect_reads, /debug/status,
// /debug/timeline and the console's views need the admin token (401
// without), probes and metrics stay open, and the runners' own requests
// to each other carry it: the cluster view reaches both. Without a
// credential configured the key is refused by name.
func TestProtectReads(t *testing.T) {
	c := newTestCluster(t)
	extra := []string{"admin.token=" + consoleToken, "admin.protect_reads=true"}
	x := c.startWith("p1", extra)
	c.startWith("p2", extra)
	for _, p := range []string{"/debug/status", "/debug/timeline", "/ui/api/cluster", "/ui/api/shards", "/ui/api/timeline"} {
		if code, b := consoleDo(t, x, http.MethodGet, p, "", ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d %s, want 401", p, code, b)
		}
	}
	for _, p := range []string{"/metrics", "/healthz", "/ui/api/session"} {
		if code, _ := consoleDo(t, x, http.MethodGet, p, "", ""); code != http.StatusOK {
			t.Errorf("GET %s without the token: %d, want 200", p, code)
		}
	}
	if code, _ := consoleDo(t, x, http.MethodGet, "/debug/status", consoleToken, ""); code != http.StatusOK {
		t.Errorf("/debug/status with the token: %d", code)
	}
	testenv.WaitFor(t, "both runners reachable in the cluster view", 20*time.Second, func() bool {
		var cl clusterJSON
		consoleGet(t, x, "/ui/api/cluster", &cl)
		return len(cl.Runners) == 2 && cl.Runners[0].Reachable && cl.Runners[1].Reachable
	})

	cfg, _ := c.config("p3")
	cfg.Admin.ProtectReads = true
	_, err := New(cfg)
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "admin.protect_reads") {
		t.Errorf("protect_reads without a credential: %v, want an invalid config naming admin.protect_reads", err)
	}
}

// TestResidentEndpoint: GET /debug/shards/{group}/{index}/resident lists
// the entities resident for a shard the runner owns, behind the admin
// auth; the status counts them and the call rate.
func TestResidentEndpoint(t *testing.T) {
	c := newTestCluster(t)
	x := c.startWith("res", []string{"admin.token=" + consoleToken}, WithEntities(CounterDefinition(TypeCounter)))
	testenv.WaitFor(t, "every shard owned", 10*time.Second, func() bool { return x.status(t).Owned == 8 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := x.r.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Call(ctx, TypeCounter, "r-1", []byte(`{"add":1}`)); err != nil {
		t.Fatal(err)
	}
	shard := task.ShardOf(storage.DefaultGroup, 8, TypeCounter, "r-1", "")
	path := fmt.Sprintf("/debug/shards/%s/%d/resident", shard.Group, shard.Index)
	if code, _ := consoleDo(t, x, http.MethodGet, path, "", ""); code != http.StatusUnauthorized {
		t.Errorf("resident without the token: %d, want 401", code)
	}
	var rr struct {
		Owned    bool
		Resident []struct{ Type, ID string }
	}
	consoleGet(t, x, path, &rr)
	if !rr.Owned || len(rr.Resident) != 1 || rr.Resident[0].ID != "r-1" || rr.Resident[0].Type != TypeCounter {
		t.Errorf("resident of %s: %+v", shard, rr)
	}
	testenv.WaitFor(t, "the status to count the resident entity and measure rates", 5*time.Second, func() bool {
		st := x.status(t)
		return st.ResidentEntities == 1 && st.CallsPerSecond != nil && st.RolloutBucket == RolloutBucket("res")
	})
	// GET / leads to the console's pages.
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get("http://" + x.r.AdminAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /: %d to %q, want a redirect to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestConsoleMounts: the admin handler serves the console's API before
// the runner runs (503 not_available where it needs the running parts,
// the session at once), redirects / to /ui/, and leaves GET /ui/ to the
// pages: registering it on the same mux does not conflict.
func TestConsoleMounts(t *testing.T) {
	r := newIdleRunner(t, "admin.token="+consoleToken)
	h := r.Handler()
	for _, tc := range []struct {
		method, path string
		code         int
		body         string
	}{
		{http.MethodGet, "/ui/api/session", http.StatusOK, `"auth_configured":true`},
		{http.MethodGet, "/ui/api/cluster", http.StatusServiceUnavailable, `"code":"not_available"`},
		{http.MethodPost, "/ui/api/runners/x/drain", http.StatusUnauthorized, `"code":"unauthorized"`},
		{http.MethodGet, "/ui/", http.StatusOK, `<script type="module" src="app.js">`},
		{http.MethodGet, "/ui/index.html", http.StatusOK, `<script type="module" src="app.js">`},
		{http.MethodGet, "/ui/app.js", http.StatusOK, "/ui/api/"},
		{http.MethodGet, "/", http.StatusFound, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%s %s: %d %s, want %d with %s", tc.method, tc.path, rec.Code, rec.Body, tc.code, tc.body)
		}
	}
}
