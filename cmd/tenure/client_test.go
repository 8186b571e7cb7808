package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/external"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// cliMainEnv set to 1 makes the test binary act as the tenure command
// (Main on its arguments), so that tests can run the CLI as a process of
// its own, as an exec: handler does, without building it. (Not a TENURE_*
// name: runners do not pass those on to handlers.)
const cliMainEnv = "CLITEST_AS_TENURE"

func TestMain(m *testing.M) {
	if os.Getenv(cliMainEnv) == "1" {
		cli := &CLI{Stdout: os.Stdout, Stderr: os.Stderr, Environ: os.Environ(), Version: "test"}
		os.Exit(Main(context.Background(), cli, os.Args[1:]))
	}
	testenv.Main(m)
}

// cmdFunc is the signature every command has.
type cmdFunc func(context.Context, *CLI, []string) error

// cliCluster is a cluster for CLI tests: its own name (and so etcd prefix)
// on the shared etcd, its own bucket on the shared S3, and a config file
// naming them.
type cliCluster struct {
	t       *testing.T
	name    string
	shards  int
	cfgPath string
	etcd    *etcd.Store // the test's own view of the cluster's etcd keys
}

const cliShards = 8

// newCLICluster writes the config of a new cluster; initialise writes its
// meta, as the first runner would. The config sets s3.region: the
// embedded S3 checks it, and an unset one would follow the machine's AWS
// environment.
func newCLICluster(t *testing.T, initialise bool) *cliCluster {
	t.Helper()
	e := testenv.SharedEtcd(t)
	s3 := testenv.SharedS3(t)
	c := &cliCluster{t: t, name: testenv.Name(t, 40), shards: cliShards}
	ak, sk := s3.Credentials()
	cfg := fmt.Sprintf(`cluster: %s
shards: %d
admin_addr: 127.0.0.1:0
admin:
  token: cli-test-admin-token
etcd:
  endpoints: [%s]
  request_timeout: 2s
s3:
  endpoint: %s
  region: %s
  bucket: %s
  path_style: true
  access_key: %s
  secret_key: %s
lease:
  ttl: 2s
detachment:
  recover_window: 500ms
sharding:
  rebalance_debounce: 50ms
  rebalance_interval: 2s
  interrupt_timeout: 2s
entity:
  task_lease: 3s
  reconcile_interval: 2s
drain_timeout: 10s
log:
  level: warn
`, c.name, c.shards, e.Endpoint(), s3.Endpoint(), s3.Region(), s3.Bucket(t), ak, sk)
	c.cfgPath = filepath.Join(t.TempDir(), "tenure.yaml")
	if err := os.WriteFile(c.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	c.etcd, err = etcd.New(e.Client(t), etcd.WithPrefix(runner.EtcdPrefix(c.name)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.etcd.Close() })
	if initialise {
		ctx := testCtx(t, 10*time.Second)
		meta := storage.ClusterMeta{Shards: c.shards, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName}
		if _, err := c.etcd.EnsureMeta(ctx, meta); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// run runs a command against the cluster and returns what it printed.
func (c *cliCluster) run(fn cmdFunc, args ...string) (stdout, stderr string, err error) {
	c.t.Helper()
	return runCmd(c.t, c.cfgPath, fn, args...)
}

func runCmd(t *testing.T, cfgPath string, fn cmdFunc, args ...string) (string, string, error) {
	t.Helper()
	return runCmdEnv(t, cfgPath, []string{"USER=tester"}, fn, args...)
}

// runCmdEnv runs a command with environ as its environment.
func runCmdEnv(t *testing.T, cfgPath string, environ []string, fn cmdFunc, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cli := &CLI{Stdout: &out, Stderr: &errOut, Environ: environ, ConfigPath: cfgPath, Version: "test"}
	err := fn(testCtx(t, 60*time.Second), cli, args)
	return out.String(), errOut.String(), err
}

// mustRun runs a command that must succeed.
func (c *cliCluster) mustRun(fn cmdFunc, args ...string) string {
	c.t.Helper()
	out, errOut, err := c.run(fn, args...)
	if err != nil {
		c.t.Fatalf("%q: %v\nstdout: %s\nstderr: %s", args, err, out, errOut)
	}
	return out
}

// cliRunner is a runner running in the test process, as `tenure run`
// would run it.
type cliRunner struct {
	t      *testing.T
	id     string
	r      *runner.Runner
	cancel context.CancelFunc
	done   chan error
}

// startRunner starts a runner with the built-in handlers, a "fail" type
// whose command always fails and the handlers of specs (TYPE=SPEC).
func (c *cliCluster) startRunner(id string, specs ...string) *cliRunner {
	c.t.Helper()
	return c.startRunnerWith(id, nil, specs...)
}

// startRunnerWith is startRunner with config overrides (key=value).
func (c *cliCluster) startRunnerWith(id string, overrides []string, specs ...string) *cliRunner {
	t := c.t
	t.Helper()
	cfg, err := runner.Load(c.cfgPath, nil, append([]string{"runner_id=" + id}, overrides...))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runner %s logs:\n%s", id, logs.String())
		}
	})
	r, err := runner.New(cfg, runner.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
		runner.WithTypes(func(h *entity.Host) error {
			if err := runner.RegisterBuiltins(h); err != nil {
				return err
			}
			return external.RegisterHandlers(h, append([]string{"fail=exec:echo broken >&2; exit 1"}, specs...))
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &cliRunner{t: t, id: id, r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { x.done <- r.Run(ctx) }()
	t.Cleanup(x.stop)
	testenv.WaitFor(t, "runner "+id+" serves its admin endpoint", 20*time.Second, func() bool { return r.AdminAddr() != "" })
	return x
}

func (x *cliRunner) stop() {
	if x.cancel == nil {
		return
	}
	x.cancel()
	x.cancel = nil
	select {
	case <-x.done:
	case <-time.After(30 * time.Second):
		x.t.Errorf("runner %s did not stop within 30s", x.id)
	}
}

type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// assertOneLine fails unless err is a non-nil one-line error containing
// want.
func assertOneLine(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: no error, want one containing %q", what, want)
	case strings.Contains(err.Error(), "\n"):
		t.Errorf("%s: error spans lines:\n%v", what, err)
	case !strings.Contains(err.Error(), want):
		t.Errorf("%s: error %q does not contain %q", what, err, want)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	// The default file is looked for in dir, which has none whatever the
	// working directory holds.
	def := filepath.Join(dir, DevDir, "tenure.yaml")
	cli := &CLI{Stderr: &bytes.Buffer{}, Stdout: &bytes.Buffer{}, defaultConfig: def}
	_, err := cli.LoadConfig(nil)
	if !errors.Is(err, ErrNoConfig) || err.Error() != "no config: run `tenure dev` here, pass --config or set TENURE_CONFIG" {
		t.Errorf("no config anywhere: err = %v, want ErrNoConfig", err)
	}

	// Once there, the default file is the config.
	if err := os.MkdirAll(filepath.Dir(def), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(def, []byte("cluster: c8\netcd:\n  endpoints: [http://127.0.0.1:2379]\ns3:\n  bucket: b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err := cli.LoadConfig(nil); err != nil || cfg.Cluster != "c8" {
		t.Errorf("the default file %s: cluster %q, %v; want c8 from it", def, cfg.Cluster, err)
	}
	if err := os.Remove(def); err != nil {
		t.Fatal(err)
	}

	// TENURE_* variables alone are a config (containers have no file).
	cli.Environ = []string{"TENURE_ETCD_ENDPOINTS=http://127.0.0.1:2379", "TENURE_S3_BUCKET=b", "TENURE_CLUSTER=c9"}
	cfg, err := cli.LoadConfig([]string{"shards=4"})
	if err != nil || cfg.Cluster != "c9" || cfg.Shards != 4 || cfg.S3.Bucket != "b" {
		t.Errorf("env-only config: %+v, %v", cfg, err)
	}

	cli.Environ = nil
	cli.ConfigPath = filepath.Join(dir, "missing.yaml")
	_, err = cli.LoadConfig(nil)
	assertOneLine(t, "missing file", flatten(err), "missing.yaml")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want os.ErrNotExist in the chain", err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("etcd:\n  endpointz: [x]\n"), 0o600)
	cli.ConfigPath = bad
	_, err = cli.LoadConfig(nil)
	assertOneLine(t, "unknown key", flatten(err), "endpointz")
}

// TestSubmitArgs: flags go anywhere among the positional arguments, and
// "--" ends them.
func TestSubmitArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		typ  string
		wait bool
		in   string
	}{
		{[]string{"echo", "--input", `{"x":1}`, "--wait"}, "echo", true, `{"x":1}`},
		{[]string{"--wait", "echo"}, "echo", true, ""},
		{[]string{"--input=1", "a"}, "a", false, "1"},
		{[]string{"--", "--wait"}, "--wait", false, ""},
	} {
		cli := &CLI{}
		cmd := newSubmitCmd(cli)
		var typ string
		var f submitFlags
		cmd.RunE = func(_ *cobra.Command, args []string) error {
			typ = args[0]
			f.wait, _ = cmd.Flags().GetBool("wait")
			f.input, _ = cmd.Flags().GetString("input")
			return nil
		}
		cmd.SetArgs(tc.args)
		if err := cmd.Execute(); err != nil || typ != tc.typ || f.wait != tc.wait || f.input != tc.in {
			t.Errorf("submit %q: type %q, %v (wait %v, input %q); want %q (wait %v, input %q)", tc.args, typ, err, f.wait, f.input, tc.typ, tc.wait, tc.in)
		}
	}
}

func TestConnectErrors(t *testing.T) {
	// A cluster no runner started: no meta.
	c := newCLICluster(t, false)
	_, _, err := c.run(Status)
	if !errors.Is(err, ErrNotInitialised) {
		t.Errorf("uninitialised cluster: err = %v, want ErrNotInitialised", err)
	}
	assertOneLine(t, "uninitialised cluster", err, c.name)

	// Nothing listens at the etcd endpoint: a bounded, clear failure.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	start := time.Now()
	var out, errOut bytes.Buffer
	cli := &CLI{Stdout: &out, Stderr: &errOut, ConfigPath: c.cfgPath,
		Environ: []string{"TENURE_ETCD_ENDPOINTS=" + dead, "TENURE_ETCD_DIAL_TIMEOUT=500ms"}}
	err = Status(testCtx(t, 30*time.Second), cli, nil)
	assertOneLine(t, "unreachable etcd", err, dead)
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("unreachable etcd: err = %v, want storage.ErrUnavailable", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("unreachable etcd took %s to report", d)
	}
	if strings.Contains(err.Error(), "tenure dev") {
		t.Errorf("unreachable etcd of a config that is not tenure dev's suggests it: %v", err)
	}

	// With the config tenure dev writes, an unreachable S3 is named too,
	// and the error suggests starting the local cluster.
	ci := newCLICluster(t, true)
	b, err := os.ReadFile(ci.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	devCfg := filepath.Join(t.TempDir(), "tenure.yaml")
	if err := os.WriteFile(devCfg, append([]byte(devConfigHeader+": the local cluster's endpoints.\n"), b...), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := mainRun(t, []string{"TENURE_S3_ENDPOINT=" + dead}, "--config", devCfg, "task", "list")
	if code != 1 || !strings.Contains(stderr, "s3 ") || !strings.Contains(stderr, dead) ||
		!strings.Contains(stderr, "is the local cluster running? start it with `tenure dev` (config "+devCfg+")") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("task list with S3 down and tenure dev's config: exit %d, stderr %q", code, stderr)
	}
	t.Logf("S3 down, tenure dev's config: %s", strings.TrimSpace(stderr))
}

// kubernetesEnv is some of what a Kubernetes Service named "tenure" puts
// into the environment of every pod of its namespace.
var kubernetesEnv = []string{"TENURE_SERVICE_HOST=10.0.0.1", "TENURE_SERVICE_PORT=80",
	"TENURE_PORT=tcp://10.0.0.1:80", "TENURE_PORT_80_TCP=tcp://10.0.0.1:80", "TENURE_PORT_80_TCP_ADDR=10.0.0.1"}

const kubernetesWarning = "warning: ignoring environment variables that name no config key: " +
	"TENURE_PORT, TENURE_PORT_80_TCP, TENURE_PORT_80_TCP_ADDR, TENURE_SERVICE_HOST, TENURE_SERVICE_PORT"

// TestUnknownEnvIgnored: every command that loads the config ignores the
// TENURE_* variables that name no key (a Kubernetes Service's, an exec:
// handler's TENURE_TASK_*) and says so in one line on stderr, naming all
// but the TENURE_TASK_* ones; a known variable with a bad value is still an
// error naming it.
func TestUnknownEnvIgnored(t *testing.T) {
	c := newCLICluster(t, true)
	env := append([]string{"USER=tester", "TENURE_TASK_ID=t1", "TENURE_TASK_REF=default/1/t1", "TENURE_TASK_ATTEMPT=1"}, kubernetesEnv...)
	for _, tc := range []struct {
		fn      cmdFunc
		args    []string
		wantErr string
	}{
		{Status, nil, ""},
		{Task, []string{"submit", "echo"}, ""},
		{Task, []string{"list"}, ""},
		{ConfigGet, nil, ""},
		{Drain, []string{"nobody"}, `runner "nobody" is not live`},
	} {
		_, errOut, err := runCmdEnv(t, c.cfgPath, env, tc.fn, tc.args...)
		if tc.wantErr != "" {
			assertOneLine(t, fmt.Sprint(tc.args), err, tc.wantErr)
		} else if err != nil {
			t.Errorf("%q: %v", tc.args, err)
		}
		if n := strings.Count(errOut, "ignoring environment variables"); n != 1 || !strings.Contains(errOut, kubernetesWarning+" (") {
			t.Errorf("%q: stderr has %d warnings, want one naming the Kubernetes variables:\n%s", tc.args, n, errOut)
		}
		if strings.Contains(errOut, "TENURE_TASK_") {
			t.Errorf("%q: stderr names a TENURE_TASK_* variable:\n%s", tc.args, errOut)
		}
	}

	// A known variable with a bad value stays an error naming it.
	_, _, err := runCmdEnv(t, c.cfgPath, append(slices.Clone(env), "TENURE_SHARDS=many"), Status)
	assertOneLine(t, "bad value", err, "TENURE_SHARDS")

	// Variables that name no key do not make a config on their own. The
	// default file is looked for where there is none, whatever the working
	// directory holds.
	cli := &CLI{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Environ: env, Version: "test",
		defaultConfig: filepath.Join(t.TempDir(), DevDir, "tenure.yaml")}
	err = Status(testCtx(t, 60*time.Second), cli, nil)
	if !errors.Is(err, ErrNoConfig) {
		t.Errorf("only unknown TENURE_* variables: err = %v, want ErrNoConfig", err)
	}
}

// TestRunIgnoresUnknownEnv: `tenure run` in a pod of a namespace with a
// Service named "tenure" starts (its runner logs the warning; see
// runner.TestLoadIgnoresUnknownEnv), prints its ready line (-o json) and
// stops cleanly.
func TestRunIgnoresUnknownEnv(t *testing.T) {
	c := newCLICluster(t, true)
	ctx, cancel := context.WithCancel(testCtx(t, 60*time.Second))
	defer cancel()
	var out, errOut logBuffer
	cli := &CLI{Stdout: &out, Stderr: &errOut, Environ: append([]string{"USER=tester"}, kubernetesEnv...), ConfigPath: c.cfgPath, Version: "test"}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cli, []string{"--runner-id", "k8s-1", "--set", "log.level=error", "-o", "json"})
	}()
	var ready RunReady
	testenv.WaitFor(t, "the runner prints its ready line", 20*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("tenure run ended: %v\n%s", err, errOut.String())
		default:
		}
		return json.Unmarshal([]byte(out.String()), &ready) == nil
	})
	if ready.Event != "ready" || ready.RunnerID != "k8s-1" || ready.Cluster != c.name || ready.AdminAddr == "" ||
		ready.CallAddr == "" || ready.Config != c.cfgPath || strings.Count(out.String(), "\n") != 1 {
		t.Errorf("ready line %q, want one line naming k8s-1, its addresses and the config", out.String())
	}
	rs, _, err := c.etcd.Runners(ctx)
	if err != nil || !slices.ContainsFunc(rs, func(r storage.RunnerInfo) bool { return r.ID == "k8s-1" }) {
		t.Errorf("a ready runner is not registered: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tenure run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("tenure run did not stop within 30s of its cancellation")
	}
}
