package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testCluster is a cluster for in-process runners (see package harness):
// a name, the shared etcd and a bucket of the shared S3.
type testCluster struct {
	*harness.Cluster
	t *testing.T
}

func newTestCluster(t *testing.T) *testCluster {
	srv, s3 := testenv.SharedEtcd(t), testenv.SharedS3(t)
	ak, sk := s3.Credentials()
	name := testenv.Name(t, 40)
	return &testCluster{t: t, Cluster: harness.New(t, harness.Spec{Name: name, Etcd: srv.Endpoint(), Prefix: EtcdPrefix(name),
		Meta: storage.ClusterMeta{Shards: 8, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName},
		S3:   harness.S3{Endpoint: s3.Endpoint(), Region: s3.Region(), AccessKey: ak, SecretKey: sk, Bucket: s3.Bucket(t)}})}
}

// config returns a runner config for the cluster, with fast timings; etcd
// is reached through a proxy the caller can cut. extra are more overrides
// (key=value), applied last.
func (c *testCluster) config(id string, extra ...string) (Config, *testenv.Proxy) {
	p, err := c.Proxy()
	if err != nil {
		c.t.Fatal(err)
	}
	overrides := append(c.RunnerConfig(harness.ProxyURL(p)), "runner_id="+id, "admin_addr=127.0.0.1:0", "etcd.request_timeout=1s",
		"lease.ttl=2s", "detachment.recover_window=500ms", "sharding.rebalance_debounce=50ms",
		"sharding.rebalance_interval=2s", "sharding.interrupt_timeout=2s", "entity.task_lease=3s",
		"drain_timeout=10s", "log.level=warn")
	cfg, err := Load("", nil, append(overrides, extra...))
	if err != nil {
		c.t.Fatal(err)
	}
	return cfg, p
}

// store returns a store of the cluster's keys, directly on etcd.
func (c *testCluster) store() *etcd.Store {
	c.t.Helper()
	st, err := c.Store(context.Background(), "")
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

// running is a Runner running in the test.
type running struct {
	*harness.Run
	r     *Runner
	proxy *testenv.Proxy
}

func (c *testCluster) start(id string, opts ...Option) *running {
	return c.startWith(id, nil, opts...)
}

// startWith starts a runner with more config overrides (key=value).
func (c *testCluster) startWith(id string, extra []string, opts ...Option) *running {
	cfg, p := c.config(id, extra...)
	opts = append([]Option{WithTypes(func(h *entity.Host) error {
		return h.RegisterFunc("echo", func(_ context.Context, t *task.Task) (json.RawMessage, error) { return t.Input, nil })
	})}, opts...)
	r, err := New(cfg, opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	x := &running{Run: harness.Go(r.Run), r: r, proxy: p}
	c.t.Cleanup(func() { x.stop(c.t) })
	testenv.WaitFor(c.t, "admin server of "+id, 10*time.Second, func() bool { return r.AdminAddr() != "" })
	return x
}

func (x *running) stop(t *testing.T) {
	switch err := x.Stop(30 * time.Second); {
	case errors.Is(err, harness.ErrStopTimeout):
		t.Error("runner did not stop")
	case err != nil:
		t.Errorf("Run: %v", err)
	}
}

func (x *running) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + x.r.AdminAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (x *running) status(t *testing.T) Status {
	t.Helper()
	code, b := x.get(t, "/debug/status")
	var st Status
	if code != 200 || json.Unmarshal(b, &st) != nil {
		t.Fatalf("/debug/status: %d %s", code, b)
	}
	return st
}

// TestRunnerServesAndRuns: a runner registers, owns every shard, serves its
// admin endpoints and runs a task; cancelling Run stops it cleanly.
func TestRunnerServesAndRuns(t *testing.T) {
	c := newTestCluster(t)
	x := c.start("solo")
	testenv.WaitFor(t, "ready", 10*time.Second, func() bool { code, _ := x.get(t, "/readyz"); return code == 200 })
	testenv.WaitFor(t, "every shard owned", 10*time.Second, func() bool { return x.status(t).Owned == 8 })
	st := x.status(t)
	if !st.Attached || st.Owned != 8 || st.Mode != "enforce" || st.Types[0] != "echo" || st.LeaseDeadlineLag <= 0 {
		t.Fatalf("status %+v", st)
	}
	if code, b := x.get(t, "/metrics"); code != 200 || !contains(string(b), "tenure_sharding_owned_shards 8") || !contains(string(b), "tenure_runner_config_version") {
		t.Fatalf("/metrics: %d", code)
	}
	// A client submits; the runner runs it.
	cfg := x.r.Config()
	obj, err := OpenObjectStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rs := c.store()
	client, err := task.NewClient(task.NewStore(obj), task.ClientConfig{Shards: 8, Waker: rs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tk, _, err := client.Submit(ctx, task.SubmitRequest{Type: "echo", Input: json.RawMessage(`{"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	done, err := client.Wait(ctx, tk.Ref(), 20*time.Millisecond)
	if err != nil || done.Status != task.Completed || string(done.Result) != `{"x":1}` {
		t.Fatalf("task: %+v %v", done, err)
	}
	x.stop(t)
	// After a graceful stop the lease is revoked: no runner, no locks.
	runners, _, err := rs.Runners(ctx)
	locks, _, _ := rs.ShardLocks(ctx)
	if err != nil || len(runners) != 0 || len(locks) != 0 {
		t.Fatalf("after stop: %d runners, %d locks, %v", len(runners), len(locks), err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestReadyzFollowsAttachment: /readyz is 503 while the runner is detached
// (cut off from etcd) and 200 once it is attached again.
func TestReadyzFollowsAttachment(t *testing.T) {
	c := newTestCluster(t)
	x := c.start("cut")
	testenv.WaitFor(t, "ready", 10*time.Second, func() bool { code, _ := x.get(t, "/readyz"); return code == 200 })
	x.proxy.SetMode(testenv.Blackhole)
	testenv.WaitFor(t, "/readyz 503", 10*time.Second, func() bool { code, _ := x.get(t, "/readyz"); return code == 503 })
	if st := x.status(t); st.Attached || st.DetachReason == "" || st.Owned != 0 {
		t.Fatalf("detached status %+v", st)
	}
	x.proxy.SetMode(testenv.Pass)
	testenv.WaitFor(t, "/readyz 200 again", 20*time.Second, func() bool { code, _ := x.get(t, "/readyz"); return code == 200 })
}

// TestStagedRollout: a dynamic config change rolled out to 50% reaches
// exactly the runners under the hash cut, live, without restarts; an
// invalid document is ignored and the last good config kept.
func TestStagedRollout(t *testing.T) {
	c := newTestCluster(t)
	var xs []*running
	for i := 0; i < 6; i++ {
		xs = append(xs, c.start(fmt.Sprintf("roll-%d", i)))
	}
	rs := c.store()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Version 1: observe mode for 50% of the runners (what `tenure config
	// set detachment.mode=observe --rollout 50` writes to an empty key).
	doc := DynamicDoc{Version: 1, Canary: map[string]string{"detachment.mode": "observe"}, Rollout: 50, UpdatedAt: time.Now().UTC(), UpdatedBy: "test"}
	raw, _ := json.Marshal(doc)
	if _, err := rs.PutConfig(ctx, raw, 0); err != nil {
		t.Fatal(err)
	}
	started := map[string]string{}
	for _, x := range xs {
		started[x.r.cfg.RunnerID] = x.status(t).StartedAt
	}
	under := 0
	for _, x := range xs {
		id := x.r.cfg.RunnerID
		want := "enforce"
		if RolloutBucket(id) < 50 {
			want = "observe"
			under++
		}
		testenv.WaitFor(t, id+" in "+want, 10*time.Second, func() bool {
			st := x.status(t)
			return st.ConfigVersion == 1 && st.Mode == want && st.ConfigCanary == (want == "observe")
		})
	}
	t.Logf("%d of %d runners under the 50%% cut", under, len(xs))
	// An invalid document (a margin beyond the TTL) is ignored.
	// Version 2 promotes the canary and adds the bad margin, for everyone.
	bad := DynamicDoc{Version: 2, Base: map[string]string{"detachment.mode": "observe", "detachment.margin": "5s"}, Rollout: 100, UpdatedAt: time.Now().UTC(), UpdatedBy: "test"}
	raw, _ = json.Marshal(bad)
	cur, _ := rs.Config(ctx)
	if _, err := rs.PutConfig(ctx, raw, cur.Revision); err != nil {
		t.Fatal(err)
	}
	for _, x := range xs {
		testenv.WaitFor(t, "the invalid document to be rejected", 10*time.Second, func() bool {
			st := x.status(t)
			return st.ConfigError != "" && st.ConfigVersion == 1
		})
		st := x.status(t)
		if st.StartedAt != started[x.r.cfg.RunnerID] || !st.Registered {
			t.Fatalf("%s restarted or deregistered: %+v", x.r.cfg.RunnerID, st)
		}
		// It says which document it refuses and why, and reports the
		// settings a tool checks documents against.
		if want := "runner " + x.r.cfg.RunnerID + " refuses dynamic config version 2"; !strings.Contains(st.ConfigError, want) ||
			!strings.Contains(st.ConfigError, "detachment.margin") {
			t.Errorf("%s: config_error %q, want it to contain %q and the key", x.r.cfg.RunnerID, st.ConfigError, want)
		}
		if st.StaticConfig["lease.ttl"] != x.r.cfg.Lease.TTL.String() || st.StaticConfig["detachment.mode"] != "enforce" {
			t.Errorf("%s: static_config %v", x.r.cfg.RunnerID, st.StaticConfig)
		}
	}
}

// TestS3RegionFollowsAWSChain: with s3.region unset the runner's S3
// requests are signed for the AWS chain's region (here AWS_REGION, over
// the profile's), and us-east-1 without one; a set s3.region wins.
func TestS3RegionFollowsAWSChain(t *testing.T) {
	var mu sync.Mutex
	var signed []string
	scope := regexp.MustCompile(`Credential=[^/]+/[0-9]{8}/([^/]+)/s3/aws4_request`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if m := scope.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
			signed = append(signed, m[1])
		}
	}))
	defer srv.Close()
	// Only the AWS environment the test sets up, never the machine's.
	dir := t.TempDir()
	awsConfig := filepath.Join(dir, "config")
	if err := os.WriteFile(awsConfig, []byte("[default]\nregion = ap-south-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", awsConfig)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	for _, k := range []string{"AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_REGION", "eu-west-3")

	for _, tc := range []struct {
		what      string
		overrides []string
		want      string
	}{
		{"AWS_REGION", nil, "eu-west-3"},
		{"s3.region", []string{"s3.region=sa-east-1"}, "sa-east-1"},
	} {
		cfg, err := Load("", nil, append([]string{"etcd.endpoints=http://127.0.0.1:2379", "s3.bucket=b", "s3.path_style=true",
			"s3.endpoint=" + srv.URL, "s3.access_key=ak", "s3.secret_key=sk"}, tc.overrides...))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		obj, err := OpenObjectStore(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		mu.Lock()
		got := signed
		signed = nil
		mu.Unlock()
		if len(got) == 0 || got[0] != tc.want || obj.Region() != tc.want {
			t.Errorf("%s: requests signed for %q (store region %q), want %s", tc.what, got, obj.Region(), tc.want)
		}
	}
	if r := DefaultConfig().S3.Region; r != "" {
		t.Errorf("DefaultConfig's s3.region = %q: an unset region could not follow the AWS chain", r)
	}
	t.Setenv("AWS_REGION", "")
	os.WriteFile(awsConfig, nil, 0o600)
	cfg, _ := Load("", nil, []string{"etcd.endpoints=http://127.0.0.1:2379", "s3.bucket=b", "s3.endpoint=" + srv.URL})
	obj, err := NewObjectStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := obj.Region(); r != "us-east-1" {
		t.Errorf("no region anywhere: region %q, want us-east-1", r)
	}
}

// TestRunJoinsV1Cluster: a cluster created with the first assignment
// procedure keeps it. A runner of this version starts in it, uses v1 (so it
// computes the owners the older runners compute) and says so in
// /debug/status. (Before, Run checked the meta against v2 before the
// sharding manager could adopt v1, and refused to start.)
func TestRunJoinsV1Cluster(t *testing.T) {
	c := newTestCluster(t)
	cfg, _ := c.config("upgraded")
	store := c.store()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v1 := placement.ProcedureV1.Name()
	if _, err := store.EnsureMeta(ctx, storage.ClusterMeta{Shards: cfg.Shards, Groups: sortedGroups(cfg.ShardGroups), Hash: v1}); err != nil {
		t.Fatal(err)
	}
	x := c.start("upgraded")
	testenv.WaitFor(t, "every shard owned", 10*time.Second, func() bool {
		if exited, err := x.Exited(); exited {
			t.Fatalf("Run ended: %v", err)
		}
		return x.status(t).Owned == cfg.Shards
	})
	if st := x.status(t); st.Procedure != v1 {
		t.Fatalf("procedure %q, want the cluster's %q", st.Procedure, v1)
	}
}

// TestStatusWhileStarting: Status may be called from any goroutine at any
// time, while Run is still starting too (a ready line, an embedding
// service's health check); under -race this fails if Run publishes state
// Status reads without the lock (the start time, the call listener).
func TestStatusWhileStarting(t *testing.T) {
	c := newTestCluster(t)
	cfg, _ := c.config("early")
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	polled := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				polled <- n
				return
			default:
			}
			_ = r.Status()
			n++
		}
	}()
	x := &running{Run: harness.Go(r.Run), r: r}
	t.Cleanup(func() { x.stop(t) })
	testenv.WaitFor(t, "registered with a call address", 10*time.Second, func() bool {
		st := r.Status()
		return st.Registered && st.CallAddr != ""
	})
	close(stop)
	if n := <-polled; n == 0 {
		t.Fatal("Status was never called while the runner started")
	}
}
