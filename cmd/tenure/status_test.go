package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

func getStatus(t *testing.T, c *cliCluster) StatusReport {
	t.Helper()
	var rep StatusReport
	if err := json.Unmarshal([]byte(c.mustRun(Status, "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func findRunner(rep StatusReport, id string) *RunnerReport {
	for i := range rep.Runners {
		if rep.Runners[i].ID == id {
			return &rep.Runners[i]
		}
	}
	return nil
}

// TestStatusWithoutRunnerProcesses: ownership comes from the etcd locks,
// the rest from each runner's admin endpoint, and a runner that does not
// answer (or answers oddly) is shown as unknown, not as an error.
func TestStatusWithoutRunnerProcesses(t *testing.T) {
	c := newCLICluster(t, true)
	ctx := testCtx(t, 30*time.Second)

	rep := getStatus(t, c)
	if rep.Cluster != c.name || rep.Shards != cliShards || len(rep.Groups) != 1 || rep.Groups[0] != "default" ||
		rep.ShardsOwned != 0 || rep.ShardsUnowned != cliShards || rep.Runners == nil || len(rep.Runners) != 0 || rep.ConfigVersion != 0 {
		t.Errorf("idle cluster: %+v", rep)
	}
	if out := c.mustRun(Status); !strings.Contains(out, "no live runners") || !strings.Contains(out, fmt.Sprintf("%d shards: 0 owned, %d unowned", cliShards, cliShards)) {
		t.Errorf("idle cluster, human output:\n%s", out)
	}

	// ghost: registered, holds 3 locks, but nothing answers at its address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	ghost, err := c.etcd.Register(ctx, storage.RunnerInfo{ID: "ghost", Addr: dead, Weight: 0, Groups: []string{"default"}, Version: "v9", Types: []string{"echo", "orders"}}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ghost.Close(context.Background()) })
	go storage.KeepAliveLoop(context.Background(), ghost, storage.KeepAliveCadence{}, nil)
	var shards []storage.ShardID
	for i := range 3 {
		shards = append(shards, storage.ShardID{Group: "default", Index: i})
	}
	if res, err := ghost.AcquireShards(ctx, shards); err != nil || len(res) != 3 || res[0].Status != storage.Acquired {
		t.Fatalf("acquire: %v, %v", res, err)
	}
	// odd: answers with a status whose fields are partly malformed.
	odd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/admin/drain" {
			w.WriteHeader(http.StatusAccepted) // and does nothing
			return
		}
		if r.URL.Path != "/debug/status" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"attached": true, "owned": "many", "lease_deadline_lag_seconds": 4.5, "mode": "observe", "config_version": 2, "future_field": [1], "unhandled_types": ["echo", "payments"]}`)
	}))
	defer odd.Close()
	oddSess, err := c.etcd.Register(ctx, storage.RunnerInfo{ID: "odd", Addr: strings.TrimPrefix(odd.URL, "http://"), Weight: 2, Groups: []string{"default"}}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { oddSess.Close(context.Background()) })
	go storage.KeepAliveLoop(context.Background(), oddSess, storage.KeepAliveCadence{}, nil)

	start := time.Now()
	rep = getStatus(t, c)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("status with an unreachable runner took %s", d)
	}
	if rep.ShardsOwned != 3 || rep.ShardsUnowned != cliShards-3 || rep.ShardsHeldUnreachable != 3 || len(rep.Runners) != 2 {
		t.Fatalf("with ghost: %+v", rep)
	}
	g := findRunner(rep, "ghost")
	if g == nil || g.Attached != nil || g.LeaseDeadlineLagSeconds != nil || g.Reachable || g.StatusError == "" ||
		g.Owned != 3 || !g.Draining || g.Addr != dead || g.Version != "v9" || g.Mode != "" ||
		g.LeaseExpiresWithinSeconds == nil || *g.LeaseExpiresWithinSeconds <= 0 || *g.LeaseExpiresWithinSeconds > 11 {
		t.Errorf("ghost: %+v", g)
	}
	// The types come from the membership record: known for a runner that
	// does not answer; none for one that advertises none.
	if g != nil && !slices.Equal(g.Types, []string{"echo", "orders"}) {
		t.Errorf("ghost's types %v, want its record's [echo orders]", g.Types)
	}
	o := findRunner(rep, "odd")
	if o != nil && (o.Types == nil || len(o.Types) != 0) {
		t.Errorf("odd's types %#v, want [] (its record has none)", o.Types)
	}
	if o == nil || o.Attached == nil || !*o.Attached || o.LeaseDeadlineLagSeconds == nil || *o.LeaseDeadlineLagSeconds != 4.5 || o.LeaseExpiresWithinSeconds != nil ||
		o.Mode != "observe" || o.ConfigVersion == nil || *o.ConfigVersion != 2 || o.Owned != 0 || !o.Reachable || o.Draining || o.Weight != 2 {
		t.Errorf("odd: %+v", o)
	}
	// A type whose tasks a runner left pending for want of a handler, and
	// that no runner hosts, is shown as such; one another runner hosts
	// (echo: the ghost's record lists it) is not.
	if len(rep.UnhostedTypes) != 1 || rep.UnhostedTypes[0].Type != "payments" || !slices.Equal(rep.UnhostedTypes[0].SeenBy, []string{"odd"}) {
		t.Errorf("unhosted types %+v, want payments seen by odd", rep.UnhostedTypes)
	}
	// The JSON keeps nulls for what is unknown (the schema promises them).
	raw := c.mustRun(Status, "--json")
	for _, want := range []string{`"types": []`, `"attached": null`, `"lease_deadline_lag_seconds": null`, `"shards_unowned": 5`, `"shards_held_unreachable": 3`} {
		if !strings.Contains(raw, want) {
			t.Errorf("status --json lacks %s:\n%s", want, raw)
		}
	}
	out := c.mustRun(Status)
	// The summary does not count the ghost's shards as owned: nobody runs
	// their work until its lease ends.
	for _, want := range []string{"ghost", "unknown", "admin unreachable", "draining", "odd", "4.5s", "observe",
		"RUNNER  TYPES", "ghost   echo, orders", "odd     (not advertised",
		"TYPE NO RUNNER HOSTS  TASKS WAITING ON", "payments              odd",
		"8 shards: 0 owned, 3 held by unreachable runners (lease ends in ≤ ", "s), 5 unowned"} {
		if !strings.Contains(out, want) {
			t.Errorf("human status lacks %q:\n%s", want, out)
		}
	}

	// drain: a runner that does not answer, and one that accepts but keeps
	// its shards past --wait.
	_, _, err = c.run(Drain, "ghost")
	assertOneLine(t, "drain of an unreachable runner", err, "asking runner ghost to drain")
	if err != nil && !strings.Contains(err.Error(), dead) {
		t.Errorf("drain error %q does not name the address %s", err, dead)
	}
	if _, err := oddSess.AcquireShards(ctx, []storage.ShardID{{Group: "default", Index: 3}, {Group: "default", Index: 4}}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, _, err = c.run(Drain, "odd", "--wait", "300ms")
	assertOneLine(t, "drain that does not finish", err, "runner odd still holds 2 shard lock(s) after 300ms (default/3, default/4)")
	if code := exitCode(err); code != exitTimedOut {
		t.Errorf("drain whose --wait ran out: exit %d, want %d", code, exitTimedOut)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 10*time.Second {
		t.Errorf("drain --wait 300ms returned after %s", d)
	}
	if out := c.mustRun(Drain, "odd", "--wait", "0"); !strings.Contains(out, "runner odd is draining") {
		t.Errorf("drain --wait 0: %s", out)
	}
}

// blockingSingleton runs until its context ends.
type blockingSingleton struct{}

func (blockingSingleton) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// TestStatusShowsSingletons: tenure status names the runner and shard
// each singleton runs on, as the runner reports it.
func TestStatusShowsSingletons(t *testing.T) {
	c := newCLICluster(t, true)
	cfg, err := runner.Load(c.cfgPath, nil, []string{"runner_id=s1"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(cfg, runner.WithTypes(func(h *entity.Host) error {
		return h.RegisterSingleton("leader", func() (entity.Singleton, error) { return blockingSingleton{}, nil })
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var rep StatusReport
	testenv.WaitFor(t, "status to show the singleton", 30*time.Second, func() bool {
		rep = getStatus(t, c)
		return len(rep.Singletons) == 1 && rep.Singletons[0].Running
	})
	s := rep.Singletons[0]
	want := entity.SingletonShard("default", cliShards, "leader").String()
	if s.Type != "leader" || s.Runner != "s1" || s.Shard != want || s.Since.IsZero() {
		t.Fatalf("singleton %+v, want leader on s1, shard %s", s, want)
	}
	if out := c.mustRun(Status); !strings.Contains(out, "SINGLETON") || !strings.Contains(out, "leader") {
		t.Fatalf("human output lacks the singleton:\n%s", out)
	}
}
