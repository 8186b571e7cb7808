package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// adminToken is the cluster's admin credential: the console's user-data
// views and actions need it.
const adminToken = "e2e-admin-token-0123456789"

// tenureBin is the tenure CLI the test runs (`tenure status -o json`),
// built by TestMain.
var tenureBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenure-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tenureBin = filepath.Join(dir, "tenure")
	// Built in the tenure module (the directory above), whose go.sum has
	// the CLI's dependencies; this module needs only the runner's.
	build := exec.Command("go", "build", "-o", tenureBin, "./cmd/tenure")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building tenure:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	testenv.Main(m)
}

// cluster is three in-process runners, each reaching etcd through a proxy
// the test can cut.
type cluster struct {
	*harness.Cluster
	t       *testing.T
	runners map[string]*member
}

// member is one running runner.
type member struct {
	id    string
	r     *runner.Runner
	run   *harness.Run
	proxy *testenv.Proxy
}

// admin is the member's admin base URL.
func (m *member) admin() string { return "http://" + m.r.AdminAddr() }

func newCluster(t *testing.T, ids ...string) *cluster {
	srv, s3 := testenv.SharedEtcd(t), testenv.SharedS3(t)
	ak, sk := s3.Credentials()
	name := testenv.Name(t, 30)
	c := &cluster{t: t, runners: map[string]*member{}, Cluster: harness.New(t, harness.Spec{Name: name, Etcd: srv.Endpoint(),
		Prefix: runner.EtcdPrefix(name),
		Meta:   storage.ClusterMeta{Shards: 16, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName},
		S3:     harness.S3{Endpoint: s3.Endpoint(), Region: s3.Region(), AccessKey: ak, SecretKey: sk, Bucket: s3.Bucket(t)}})}
	for _, id := range ids {
		c.start(id)
	}
	return c
}

// overrides are the settings of every member: the cluster's, the admin
// token, and timings that keep a partition's detach within seconds.
func (c *cluster) overrides(etcdEndpoint string) []string {
	return append(c.RunnerConfig(etcdEndpoint), "admin.token="+adminToken, "etcd.request_timeout=1s",
		"lease.ttl=4s", "detachment.recover_window=500ms", "sharding.rebalance_debounce=50ms",
		"sharding.interrupt_timeout=2s", "drain_timeout=10s", "log.level=warn")
}

func (c *cluster) start(id string) *member {
	t := c.t
	p, err := c.Proxy()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := runner.Load(os.DevNull, nil, append(c.overrides(harness.ProxyURL(p)), "runner_id="+id, "admin_addr=127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(cfg, runner.WithEntities(runner.CounterDefinition(runner.TypeCounter)))
	if err != nil {
		t.Fatal(err)
	}
	m := &member{id: id, r: r, run: harness.Go(r.Run), proxy: p}
	c.runners[id] = m
	t.Cleanup(func() {
		if err := m.run.Stop(30 * time.Second); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("runner %s: %v", id, err)
		}
	})
	testenv.WaitFor(t, "the admin server of "+id, 10*time.Second, func() bool { return r.AdminAddr() != "" })
	return m
}

// cliEnv is the environment `tenure` needs to reach the cluster without a
// config file.
func (c *cluster) cliEnv() []string {
	env := []string{"TENURE_CONFIG=" + os.DevNull, "HOME=" + c.t.TempDir()}
	for _, kv := range c.overrides(c.Etcd) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, runner.EnvPrefix+strings.ToUpper(strings.NewReplacer(".", "_").Replace(k))+"="+v)
	}
	return append(env, "PATH="+os.Getenv("PATH"))
}

// tenure runs the CLI with args and returns its standard output.
func (c *cluster) tenure(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tenureBin, args...)
	cmd.Env = c.cliEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("tenure %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// get fetches path from the member's admin server with the admin token
// (empty token: none).
func get(ctx context.Context, url, token string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
