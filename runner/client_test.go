package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// These tests use the runner as an embedding service does, from outside
// the package, against the shared etcd and S3 servers.

// embedConfig is a config for a cluster of its own (named cluster, or a
// fresh one when empty), with fast timings; extra are more overrides.
func embedConfig(t *testing.T, cluster, runnerID string, extra ...string) runner.Config {
	t.Helper()
	if cluster == "" {
		cluster = testenv.Name(t, 40)
	}
	srv, s3 := testenv.SharedEtcd(t), testenv.SharedS3(t)
	ak, sk := s3.Credentials()
	cfg, err := runner.Load("", nil, append([]string{
		"cluster=" + cluster, "runner_id=" + runnerID, "shards=8", "admin_addr=127.0.0.1:0",
		"etcd.endpoints=" + srv.Endpoint(),
		"s3.endpoint=" + s3.Endpoint(), "s3.region=" + s3.Region(), "s3.bucket=" + s3.Bucket(t), "s3.path_style=true",
		"s3.access_key=" + ak, "s3.secret_key=" + sk,
		"lease.ttl=2s", "sharding.rebalance_debounce=50ms", "sharding.interrupt_timeout=2s",
		"drain_timeout=10s", "log.level=warn",
	}, extra...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runRunner runs r until the test ends (or stop is called), and checks
// that Run returned nil within 30s of its cancellation.
func runRunner(t *testing.T, r *runner.Runner) (stop func()) {
	t.Helper()
	run := harness.Go(r.Run)
	stop = func() {
		switch err := run.Stop(30 * time.Second); {
		case errors.Is(err, harness.ErrStopTimeout):
			t.Error("the runner did not stop within 30s")
		case err != nil:
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// createMeta writes the cluster meta of cfg's cluster with shards shards,
// as the first runner would.
func createMeta(t *testing.T, cfg runner.Config, shards int) {
	t.Helper()
	rs, err := runner.DialEtcd(testContext(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	meta := storage.ClusterMeta{Shards: shards, Groups: []string{"a", storage.DefaultGroup}, Hash: placement.HashName}
	if _, err := rs.EnsureMeta(testContext(t), meta); err != nil {
		t.Fatal(err)
	}
}

// greetIn and greetOut are a typed handler's input and result.
type greetIn struct {
	Name string `json:"name"`
}

type greetOut struct {
	Greeting string `json:"greeting"`
	Runner   string `json:"runner"`
}

// greetTypes registers the built-in types and "greet", a typed handler.
func greetTypes(runnerID string) runner.Option {
	return runner.WithTypes(func(h *entity.Host) error {
		if err := runner.RegisterBuiltins(h); err != nil {
			return err
		}
		return h.RegisterFunc("greet", entity.Func(func(_ context.Context, in greetIn) (greetOut, error) {
			return greetOut{Greeting: "hello " + in.Name, Runner: runnerID}, nil
		}))
	})
}

// TestConnectPlacesByClusterMeta: a client Connect builds places tasks by
// the shard count of the cluster meta, not by the config's (a config
// saying 8 shards, a cluster of 3), and a runner of the cluster runs them;
// a typed handler's input and result go through as Go values, and an input
// that does not decode fails its task at once, with an error naming the
// task and the Go type.
func TestConnectPlacesByClusterMeta(t *testing.T) {
	ctx := testContext(t)
	cfg := embedConfig(t, "", "client")
	createMeta(t, cfg, 3)
	c, err := runner.Connect(ctx, cfg, runner.WithClientLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if m := c.Meta(); m.Shards != 3 || c.Group() != storage.DefaultGroup {
		t.Fatalf("meta %+v, group %q: want 3 shards, group default", m, c.Group())
	}
	// An id that 8 shards would put on a shard the cluster does not have.
	var id string
	for i := 0; id == ""; i++ {
		if cand := fmt.Sprintf("t-%d", i); task.ShardOf(storage.DefaultGroup, 8, runner.TypeEcho, "", cand).Index >= 3 {
			id = cand
		}
	}
	tk, _, err := c.Submit(ctx, task.SubmitRequest{ID: id, Type: runner.TypeEcho, Input: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if want := task.ShardOf(storage.DefaultGroup, 3, runner.TypeEcho, "", id); tk.Shard != want {
		t.Fatalf("task on shard %s, want %s (by the meta's 3 shards)", tk.Shard, want)
	}

	// A runner of the cluster (its config agrees with the meta) runs it.
	rcfg := embedConfig(t, cfg.Cluster, "worker", "shards=3", "shard_groups=a,default", "s3.bucket="+cfg.S3.Bucket)
	r, err := runner.New(rcfg, runner.WithLogger(quiet()), greetTypes("worker"))
	if err != nil {
		t.Fatal(err)
	}
	runRunner(t, r)
	done, err := c.Wait(ctx, tk.Ref(), 50*time.Millisecond)
	if err != nil || done.Status != task.Completed || string(done.Result) != `{"n":1}` {
		t.Fatalf("echo task: %+v, %v", done, err)
	}

	gt, _, err := task.SubmitInput(ctx, c, task.SubmitRequest{Type: "greet"}, greetIn{Name: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if done, err = c.Wait(ctx, gt.Ref(), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	out, err := task.Result[greetOut](done)
	if err != nil || out != (greetOut{Greeting: "hello ann", Runner: "worker"}) {
		t.Fatalf("greet result: %+v, %v", out, err)
	}

	bad, _, err := c.Submit(ctx, task.SubmitRequest{Type: "greet", Input: json.RawMessage(`{"name":42}`), MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	if done, err = c.Wait(ctx, bad.Ref(), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if done.Status != task.Failed || done.Attempt != 1 || !strings.Contains(done.Error, bad.Ref()) || !strings.Contains(done.Error, "runner_test.greetIn") {
		t.Fatalf("bad input: status %s after %d attempts, error %q; want failed at once, naming the task and runner_test.greetIn", done.Status, done.Attempt, done.Error)
	}
	if _, err := task.Result[greetOut](done); !errors.Is(err, task.ErrNotCompleted) {
		t.Fatalf("Result of the failed task: %v", err)
	}
}

// TestConnectMissingCluster: a cluster no runner has started is refused
// clearly, naming where the meta was looked for.
func TestConnectMissingCluster(t *testing.T) {
	cfg := embedConfig(t, "", "client")
	_, err := runner.Connect(testContext(t), cfg, runner.WithClientLogger(quiet()))
	if !errors.Is(err, runner.ErrClusterNotFound) {
		t.Fatalf("Connect: %v, want ErrClusterNotFound", err)
	}
	for _, want := range []string{cfg.Etcd.Endpoints[0], "/tenure/" + cfg.Cluster + "/meta", "no runner has started it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Connect: %q does not name %q", err, want)
		}
	}
}

// TestConnectWithCallersClients: Connect uses an etcd client and an S3
// client (or an aws.Config) given to it, counts its S3 requests in the
// registry given, leaves the etcd client open on Close, and fails every
// call after Close. A group the cluster does not have is refused.
func TestConnectWithCallersClients(t *testing.T) {
	ctx := testContext(t)
	cfg := embedConfig(t, "", "client")
	createMeta(t, cfg, 4)
	cli := testenv.SharedEtcd(t).Client(t)
	reg := prometheus.NewRegistry()
	c, err := runner.Connect(ctx, cfg, runner.WithEtcdClient(cli), runner.WithS3Client(testenv.SharedS3(t).Client()),
		runner.WithClientRegistry(reg), runner.WithGroup("a"), runner.WithClientLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	tk, _, err := c.Submit(ctx, task.SubmitRequest{Type: "echo"})
	if err != nil || tk.Shard.Group != "a" {
		t.Fatalf("submit: %+v, %v; want a task in group a", tk, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(ctx, "/tenure/"+cfg.Cluster+"/meta"); err != nil {
		t.Fatalf("the caller's etcd client after Close: %v", err)
	}
	if _, _, err := c.Submit(ctx, task.SubmitRequest{Type: "echo"}); !errors.Is(err, runner.ErrClientClosed) {
		t.Fatalf("submit after Close: %v, want ErrClientClosed", err)
	}
	if _, err := c.Get(ctx, tk.Ref()); !errors.Is(err, runner.ErrClientClosed) {
		t.Fatalf("get after Close: %v, want ErrClientClosed", err)
	}
	if n, err := prometheusCount(reg, "tenure_s3_requests_total"); err != nil || n == 0 {
		t.Fatalf("client S3 requests counted: %v, %v", n, err)
	}

	ak, sk := testenv.SharedS3(t).Credentials()
	awsCfg := aws.Config{Credentials: credentials.NewStaticCredentialsProvider(ak, sk, "")}
	c2, err := runner.Connect(ctx, cfg, runner.WithAWSConfig(awsCfg), runner.WithClientLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := c2.Get(ctx, tk.Ref()); err != nil || got.ID != tk.ID {
		t.Fatalf("get through an aws.Config: %v", err)
	}

	_, err = runner.Connect(ctx, cfg, runner.WithGroup("nope"), runner.WithClientLogger(quiet()))
	if !errors.Is(err, runner.ErrInvalidConfig) || !strings.Contains(err.Error(), `"nope" is not one of`) {
		t.Fatalf("unknown group: %v", err)
	}
}

// prometheusCount sums the samples of a counter family in g.
func prometheusCount(g prometheus.Gatherer, name string) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n, nil
}

// TestRunnerClient: Runner.Client waits for Run to connect, then submits
// on the runner's own connections tasks the runner runs; once the runner
// has stopped, the client and Client fail with ErrStopped. Run runs once.
func TestRunnerClient(t *testing.T) {
	ctx := testContext(t)
	cfg := embedConfig(t, "", "self", "groups=default")
	r, err := runner.New(cfg, runner.WithLogger(quiet()), greetTypes("self"))
	if err != nil {
		t.Fatal(err)
	}
	early, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = r.Client(early)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Client before Run: %v, want the context's end", err)
	}
	if _, err := r.Client(ctx, runner.WithEtcdClient(testenv.SharedEtcd(t).Client(t))); !errors.Is(err, runner.ErrInvalidConfig) {
		t.Fatalf("Client with a connection of its own: %v, want ErrInvalidConfig", err)
	}

	stop := runRunner(t, r)
	c, err := r.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Meta().Shards != 8 || c.Group() != "default" {
		t.Fatalf("meta %+v, group %q", c.Meta(), c.Group())
	}
	tk, _, err := task.SubmitInput(ctx, c, task.SubmitRequest{Type: "greet"}, greetIn{Name: "bo"})
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.Wait(ctx, tk.Ref(), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := task.Result[greetOut](done); err != nil || out.Greeting != "hello bo" || out.Runner != "self" {
		t.Fatalf("result: %+v, %v", out, err)
	}
	if err := r.Run(ctx); !errors.Is(err, runner.ErrRunAgain) {
		t.Fatalf("second Run: %v, want ErrRunAgain", err)
	}

	stop()
	if _, _, err := c.Submit(ctx, task.SubmitRequest{Type: "echo"}); !errors.Is(err, runner.ErrStopped) {
		t.Fatalf("submit after the runner stopped: %v, want ErrStopped", err)
	}
	if _, err := c.Wait(ctx, tk.Ref(), 50*time.Millisecond); !errors.Is(err, runner.ErrStopped) {
		t.Fatalf("wait after the runner stopped: %v, want ErrStopped", err)
	}
	if _, err := r.Client(ctx); !errors.Is(err, runner.ErrStopped) {
		t.Fatalf("Client after the runner stopped: %v, want ErrStopped", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestNewReportsRegistrationErrors: New refuses bad type registrations
// and a registry it cannot serve, without connecting (the config's etcd
// and S3 are unreachable).
func TestNewReportsRegistrationErrors(t *testing.T) {
	cfg, err := runner.Load("", nil, []string{"etcd.endpoints=http://127.0.0.1:1", "s3.bucket=nowhere", "log.level=error"})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	cases := []struct {
		name string
		opts []runner.Option
		want error
		text string
	}{
		{"duplicate across calls", []runner.Option{runner.WithTypes(runner.RegisterBuiltins), runner.WithTypes(runner.RegisterBuiltins)}, entity.ErrInvalidConfig, `"echo" registered twice`},
		{"invalid name", []runner.Option{runner.WithTypes(func(h *entity.Host) error {
			return h.RegisterFunc("no spaces", entity.Func(func(context.Context, greetIn) (greetOut, error) { return greetOut{}, nil }))
		})}, entity.ErrInvalidConfig, `"no spaces" must match`},
		{"nil handler", []runner.Option{runner.WithTypes(func(h *entity.Host) error { return h.RegisterFunc("x", nil) })}, entity.ErrInvalidConfig, "nil handler"},
		{"register fails", []runner.Option{runner.WithTypes(func(*entity.Host) error { return boom })}, boom, "registering types"},
		{"registerer without gatherer", []runner.Option{runner.WithRegistry(prometheus.WrapRegistererWithPrefix("svc_", prometheus.NewRegistry()))}, runner.ErrInvalidConfig, "no prometheus.Gatherer"},
		{"nil gatherer", []runner.Option{runner.WithRegistry(prometheus.NewRegistry(), nil)}, runner.ErrInvalidConfig, "nil gatherer"},
	}
	for _, tc := range cases {
		_, err := runner.New(cfg, tc.opts...)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: New: %v, want %v naming %q", tc.name, err, tc.want, tc.text)
		}
	}
	if _, err := runner.New(cfg, runner.WithTypes(runner.RegisterBuiltins)); err != nil {
		t.Fatalf("New with valid types: %v", err)
	}
}

// TestWithRegistryServesGatherer: the runner registers through the
// Registerer it is given and /metrics on the admin address serves the
// Gatherers it is given: here a wrapping registerer that adds a label, and
// the service's own registry beside the one that gathers the runner's.
func TestWithRegistryServesGatherer(t *testing.T) {
	reg, own := prometheus.NewRegistry(), prometheus.NewRegistry()
	mine := prometheus.NewCounter(prometheus.CounterOpts{Name: "embedder_requests_total", Help: "The service's own."})
	own.MustRegister(mine)
	mine.Add(7)
	cfg := embedConfig(t, "", "metrics")
	r, err := runner.New(cfg, runner.WithLogger(quiet()),
		runner.WithRegistry(prometheus.WrapRegistererWith(prometheus.Labels{"service": "shop"}, reg), reg, own))
	if err != nil {
		t.Fatal(err)
	}
	if r.Registry() != nil {
		t.Errorf("Registry() = %v, want nil for a registerer that is no *prometheus.Registry", r.Registry())
	}
	runRunner(t, r)
	var body string
	testenv.WaitFor(t, "the runner's metrics at /metrics", 20*time.Second, func() bool {
		addr := r.AdminAddr()
		if addr == "" {
			return false
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, "tenure_runner_info{")
	})
	for _, want := range []string{`service="shop"`, "embedder_requests_total 7"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestPlainWakeNotes: entity.plain_wake_notes, for rolling upgrades from
// runners that cannot read hinted notes, makes a client's submit wake the
// owner with the bare pointer key; by default the note carries the task's
// body and ETag. Read from etcd, where the owner would see it.
func TestPlainWakeNotes(t *testing.T) {
	ctx := testContext(t)
	cfg := embedConfig(t, "", "client")
	createMeta(t, cfg, 1)
	etcdCli := testenv.SharedEtcd(t).Client(t)
	wakeNote := func(extra ...string) (task.WakeNote, string) {
		t.Helper()
		c, err := runner.Connect(ctx, embedConfig(t, cfg.Cluster, "client", append([]string{"s3.bucket=" + cfg.S3.Bucket}, extra...)...), runner.WithClientLogger(quiet()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		tk, _, err := c.Submit(ctx, task.SubmitRequest{Type: runner.TypeEcho, Input: json.RawMessage(`{"n":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := etcdCli.Get(ctx, runner.EtcdPrefix(cfg.Cluster)+"wake/"+tk.Shard.Group+"/"+strconv.Itoa(tk.Shard.Index))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("wake key of %s: %v (%d keys)", tk.Shard, err, len(resp.Kvs))
		}
		note := string(resp.Kvs[0].Value)
		n, err := task.ParseWakeNote(note)
		if err != nil || n.Pointer.ID != tk.ID {
			t.Fatalf("wake note %q: %+v, %v; want the pointer of %s", note, n, err, tk.ID)
		}
		return n, note
	}
	if n, note := wakeNote(); n.Hint == nil || len(n.Hint.Body) == 0 || n.Hint.ETag == "" {
		t.Fatalf("default note %q carries no hint", note)
	}
	if n, note := wakeNote("entity.plain_wake_notes=true"); n.Hint != nil || strings.Contains(note, "\n") {
		t.Fatalf("entity.plain_wake_notes=true: note %q carries a hint", note)
	}
}
