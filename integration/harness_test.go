package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/embedded"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// binary is the tenure binary the tests run; counterBinary and cartBinary are
// the example services (examples/counter, examples/cart).
var binary, counterBinary, cartBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenure-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "tenure")
	counterBinary, cartBinary = filepath.Join(dir, "counter"), filepath.Join(dir, "cart")
	// The example services are runners too: the placement-by-type tests
	// run them as two services of one cluster.
	build := exec.Command("go", "build", "-race", "-o", dir+string(filepath.Separator),
		"github.com/tenurehq/tenure/cmd/tenure", "github.com/tenurehq/tenure/examples/counter", "github.com/tenurehq/tenure/examples/cart")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: building tenure:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a tenure process started by a test.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start runs the tenure binary with args; its output is printed if the
// test fails, and it is killed at cleanup if still running.
func start(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	return startEnv(t, name, nil, args...)
}

// startEnv is start with env added to the process's environment.
func startEnv(t testing.TB, name string, env []string, args ...string) *proc {
	t.Helper()
	return startBinary(t, binary, name, env, args...)
}

// startBinary is startEnv of another program than tenure.
func startBinary(t testing.TB, bin, name string, env []string, args ...string) *proc {
	t.Helper()
	return startLogged(t, bin, name, env, "", args...)
}

// startLogged is startBinary with, when logPath is set, the process's
// whole output appended to the file at logPath, and only what is not a
// log record below warning level kept for the failed test's printout (see
// logSplitter): a process logging at info level is recorded in full
// without flooding that printout.
func startLogged(t testing.TB, bin, name string, env []string, logPath string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	var out io.Writer = p.out
	var log *logSplitter
	if logPath != "" {
		var err error
		if log, err = newLogSplitter(logPath, p.out); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		out = log
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.Env = append(append(childEnv(), "GORACE=halt_on_error=1"), env...)
	dieWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		log.close(err)
		t.Fatalf("start %s: %v", name, err)
	}
	log.started(p.cmd.Process.Pid)
	go func() {
		p.err = p.cmd.Wait()
		log.close(p.err)
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			out := p.out.String()
			if len(out) > 20000 {
				out = out[len(out)-20000:]
			}
			t.Logf("output of %s:\n%s", name, out)
		}
	})
	return p
}

// adminToken is the admin token of every process the tests start, runners
// and CLI alike (TENURE_ADMIN_TOKEN): `tenure drain` needs one.
const adminToken = "integration-admin-token"

// childEnv is the test's environment without the soak's knobs
// (TENURE_SOAK_*), which a tenure process would warn about as naming no
// config key, and with the admin token.
func childEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TENURE_SOAK_") && !strings.HasPrefix(kv, "TENURE_ADMIN_TOKEN=") {
			out = append(out, kv)
		}
	}
	return append(out, "TENURE_ADMIN_TOKEN="+adminToken)
}

func (p *proc) signal(t testing.TB, s syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		t.Fatalf("signal %s: %v", p.name, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t testing.TB, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s did not exit within %s", p.name, within)
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatalf("%s: %v", p.name, p.err)
	return -1
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tenure runs a short tenure command and returns its stdout, failing the
// test on a non-zero exit.
func tenure(t testing.TB, args ...string) string {
	t.Helper()
	out, code, stderr := tenureCode(t, args...)
	if code != 0 {
		t.Fatalf("tenure %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return out
}

func tenureCode(t testing.TB, args ...string) (stdout string, code int, stderr string) {
	t.Helper()
	return tenureEnvCode(t, nil, args...)
}

// tenureEnvCode is tenureCode with env added to the command's environment.
func tenureEnvCode(t testing.TB, env []string, args ...string) (stdout string, code int, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(childEnv(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("tenure %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return o.String(), code, e.String()
}

// cluster is a multi-process cluster (see package harness): `tenure dev
// --runners 0` or the test process for the infrastructure, and `tenure
// run` processes, each runner reaching etcd through its own TCP proxy so a
// test can partition it.
type cluster struct {
	*harness.Cluster // Etcd is the endpoint runners reach, through their proxies
	t                testing.TB
	dir              string
	cfgPath          string
	s3EP             string          // when set, each runner reaches S3 through its own fault proxy
	members          []*testenv.Etcd // the etcd cluster, when the test runs it (newLocalCluster)
	infra            *proc
	store            *etcd.Store // nil on a cluster coordinating on S3
	// coord is the runners' coordination store, read by the helpers (who
	// owns which shard) and the task clients' waker: store, or an S3 one
	// (newS3Cluster) reaching the gateway directly.
	coord   storage.RunnerStore
	tasks   *task.Client
	runners harness.Members[*runnerProc]
	// runnerLogs, when set, is the folder of the runners' logs, one file
	// each (logRunnersTo).
	runnerLogs string
}

type runnerProc struct {
	*proc
	id    string
	admin string
	args  []string
	proxy *testenv.Proxy // etcd
	s3    *s3Proxy       // nil unless the cluster proxies S3
	// logPath, when set, is the file the runner's whole log goes to, at
	// info level, across restarts (cluster.logRunnersTo).
	logPath string
}

// Running reports whether the runner's process is running.
func (r *runnerProc) Running() bool { return !r.exited() }

func newCluster(t testing.TB) *cluster {
	t.Helper()
	return newClusterWith(t)
}

// newClusterWith is newCluster with more `tenure dev` flags
// (--shard-groups).
func newClusterWith(t testing.TB, devArgs ...string) *cluster {
	t.Helper()
	dir := t.TempDir()
	free := func() string {
		a, err := embedded.FreeStableAddr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	etcdAddr, peer, s3Addr := free(), free(), free()
	cfgPath := filepath.Join(dir, "tenure.yaml")
	infra := start(t, "tenure dev", append([]string{"dev", "--runners", "0", "--data", filepath.Join(dir, "data"),
		"--config-out", cfgPath, "--etcd-addr", etcdAddr, "--etcd-peer-addr", peer, "--s3-addr", s3Addr}, devArgs...)...)
	testenv.WaitFor(t, "the dev config file", 60*time.Second, func() bool {
		_, err := os.Stat(cfgPath)
		return err == nil || infra.exited()
	})
	if infra.exited() {
		t.Fatal("tenure dev exited")
	}
	c := newClusterOn(t, dir, "http://"+etcdAddr, devShards)
	c.infra = infra
	t.Cleanup(func() {
		c.infra.signal(t, syscall.SIGTERM)
		c.infra.wait(t, 30*time.Second)
	})
	return c
}

// newClusterOn returns the cluster of the config file in dir (whose
// cluster is "dev": the helpers read /tenure/dev/), on etcd at etcdEP,
// with a store of its own there.
func newClusterOn(t testing.TB, dir, etcdEP string, shards int) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: dir, cfgPath: filepath.Join(dir, "tenure.yaml"),
		Cluster: harness.New(t, harness.Spec{Name: "dev", Etcd: etcdEP, Prefix: runner.EtcdPrefix("dev"), Meta: storage.ClusterMeta{Shards: shards}})}
	var err error
	if c.store, err = c.Store(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	c.coord = c.store
	return c
}

// run starts `tenure run` with the given id and extra flags; its etcd
// connection (and S3's, when the cluster proxies it) goes through a proxy.
func (c *cluster) run(id string, extra ...string) *runnerProc {
	c.t.Helper()
	return c.runEnv(id, nil, extra...)
}

// runEnv is run with env added to the runner's environment.
func (c *cluster) runEnv(id string, env []string, extra ...string) *runnerProc {
	t := c.t
	t.Helper()
	r := c.newRunnerProc(id)
	r.args = []string{"run", "--config", c.cfgPath, "--runner-id", id, "--admin-addr", r.admin}
	if r.proxy != nil {
		r.args = append(r.args, "--set", "etcd.endpoints="+harness.ProxyURL(r.proxy))
	}
	r.args = append(r.args, extra...)
	if c.s3EP != "" {
		r.s3 = newS3Proxy(t, c.s3EP)
		r.args = append(r.args, "--set", "s3.endpoint="+r.s3.URL())
	}
	if c.runnerLogs != "" {
		// Last, so that it overrides a level in extra: the file gets
		// every record, the printout only warnings and above.
		r.logPath = filepath.Join(c.runnerLogs, id+".log")
		r.args = append(r.args, "--set", "log.level=info")
	}
	r.proc = startLogged(t, binary, "runner "+id, env, r.logPath, r.args...)
	c.runners.Add(id, r)
	return r
}

// newRunnerProc is a runner of id, not started yet: its etcd proxy and a
// free admin address. The addresses the tests choose for processes are
// below the kernel's ephemeral range (embedded.FreeStableAddr): a port
// from that range, free when chosen, can be taken before the process binds
// it by any listener on port 0 or any outgoing connection (a busy CI run
// failed a service's start so: "bind: address already in use").
func (c *cluster) newRunnerProc(id string) *runnerProc {
	c.t.Helper()
	admin, err := embedded.FreeStableAddr()
	if err != nil {
		c.t.Fatal(err)
	}
	r := &runnerProc{id: id, admin: admin}
	if c.Etcd == "" {
		return r // coordination on S3: no etcd to proxy
	}
	if r.proxy, err = c.Proxy(); err != nil {
		c.t.Fatal(err)
	}
	return r
}

// restart starts a runner again with the same id and connections, after it
// exited (or was killed).
func (c *cluster) restart(r *runnerProc) {
	c.t.Helper()
	r.proc = startLogged(c.t, binary, "runner "+r.id+" (restarted)", nil, r.logPath, r.args...)
}

// status fetches a runner's /debug/status.
func (r *runnerProc) status() (runner.Status, error) {
	var st runner.Status
	client := http.Client{Timeout: time.Second}
	resp, err := client.Get("http://" + r.admin + "/debug/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// owners reads the shard locks: shard → runner id.
func (c *cluster) owners() map[storage.ShardID]string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	own, err := harness.Holders(ctx, c.coord)
	if err != nil {
		return nil
	}
	return own
}

// waitAllOwned waits until every shard is locked by one of ids.
func (c *cluster) waitAllOwned(ids []string, within time.Duration) map[storage.ShardID]string {
	c.t.Helper()
	var own map[storage.ShardID]string
	testenv.WaitFor(c.t, fmt.Sprintf("all %d shards owned by %v", c.Meta.Shards, ids), within, func() bool {
		own = c.owners()
		if len(own) != c.Meta.Shards {
			return false
		}
		for _, r := range own {
			if !contains(ids, r) {
				return false
			}
		}
		return true
	})
	return own
}

// waitSettled waits until every runner answers, is attached, owns at least
// minOwned shards and owns exactly what it is assigned, with nothing
// pending.
func (c *cluster) waitSettled(rs []*runnerProc, minOwned int, within time.Duration) {
	c.t.Helper()
	err := harness.Await(context.Background(), within, 50*time.Millisecond, func() (bool, string, error) {
		for _, r := range rs {
			st, err := r.status()
			if err != nil || !st.Attached || st.Pending != 0 || st.Owned < minOwned || st.Owned != st.Assigned {
				return false, r.id + " not settled", nil
			}
		}
		return true, "", nil
	})
	if err != nil {
		for _, r := range rs {
			st, err := r.status()
			c.t.Logf("%s: %+v %v", r.id, st, err)
		}
		c.t.Fatalf("runners not settled: %v", err)
	}
}

const devShards = 64

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// taskClient connects a task client to the cluster's S3 and etcd.
func (c *cluster) taskClient() *task.Client {
	c.t.Helper()
	if c.tasks == nil {
		c.tasks = c.newTaskClient()
	}
	return c.tasks
}

// newTaskClient connects a new task client to the cluster's etcd and S3;
// overrides are config keys (key=value), e.g. another s3.endpoint.
func (c *cluster) newTaskClient(overrides ...string) *task.Client {
	c.t.Helper()
	var keys []string
	if c.Etcd != "" {
		keys = append(keys, "etcd.endpoints="+c.Etcd)
	}
	cfg, err := runner.Load(c.cfgPath, nil, append(keys, overrides...))
	if err != nil {
		c.t.Fatal(err)
	}
	obj, err := runner.OpenObjectStore(context.Background(), cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	tc, err := task.NewClient(task.NewStore(obj), task.ClientConfig{Shards: cfg.Shards, Waker: c.coord})
	if err != nil {
		c.t.Fatal(err)
	}
	return tc
}
