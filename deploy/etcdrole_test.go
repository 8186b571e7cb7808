package deploy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/runner"
)

// fakeEtcdctl records each invocation of etcdctl: its arguments separated
// by \x1f, then the password read from stdin when --interactive=false.
const fakeEtcdctl = `#!/bin/sh
stdin=
for a in "$@"; do
	if [ "$a" = --interactive=false ]; then read -r stdin; fi
done
{ printf '%s\037' "$@"; printf 'stdin=%s\n' "$stdin"; } >> "$ETCDCTL_LOG"
`

// TestEtcdRole runs deploy/etcd-role.sh with an etcdctl that records its
// commands, applies them to a real etcd as etcdctl would, turns
// authentication on, and then: a real runner logged in as the user
// registers and attaches, runs a task submitted through it and stops
// cleanly (every etcd call it makes is allowed), while the user is denied
// keys outside its cluster's prefix.
func TestEtcdRole(t *testing.T) {
	const cluster, password = "prod", "s3cret-pw"
	dir := t.TempDir()
	fake := filepath.Join(dir, "etcdctl")
	if err := os.WriteFile(fake, []byte(fakeEtcdctl), 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "log")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	script := exec.CommandContext(ctx, "sh", filepath.Join(root, "deploy", "etcd-role.sh"), cluster)
	script.Env = append(os.Environ(), "ETCDCTL="+fake, "ETCDCTL_LOG="+logFile, "ETCD_USER_PASSWORD="+password)
	if b, err := script.CombinedOutput(); err != nil {
		t.Fatalf("etcd-role.sh: %v\n%s", err, b)
	}
	log, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}

	srv := testenv.NewEtcd(t)
	admin := srv.Client(t)
	user := ""
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		fields := strings.Split(line, "\x1f")
		args, stdin := fields[:len(fields)-1], strings.TrimPrefix(fields[len(fields)-1], "stdin=")
		u, err := applyEtcdctl(ctx, admin, args, stdin)
		if err != nil {
			t.Fatalf("etcdctl %s: %v", strings.Join(args, " "), err)
		}
		if u != "" {
			user = u
		}
	}
	if user != "tenure-"+cluster {
		t.Fatalf("the script added user %q, want tenure-%s", user, cluster)
	}
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("enabling auth: %v", err)
		}
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second,
		Username: user, Password: password, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, key := range []string{"/tenure/" + cluster + "x/meta", "/tenure/other/meta", "/other"} {
		if _, err := cli.Put(ctx, key, "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("put %s as %s: %v, want permission denied", key, user, err)
		}
	}
	if _, err := cli.Get(ctx, "/tenure/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("get /tenure/ --prefix as %s: %v, want permission denied", user, err)
	}

	runRestricted(t, srv.Endpoint(), cluster, user, password)
}

// applyEtcdctl does to etcd what etcdctl does for the commands the script
// uses, and returns the user an add created.
func applyEtcdctl(ctx context.Context, cli *clientv3.Client, args []string, stdin string) (string, error) {
	cmd := strings.Join(args[:min(2, len(args))], " ")
	rest := args[min(2, len(args)):]
	var err error
	switch {
	case cmd == "role add" && len(rest) == 1:
		_, err = cli.RoleAdd(ctx, rest[0])
	case cmd == "role grant-permission" && len(rest) == 4 && rest[0] == "--prefix=true" && rest[2] == "readwrite":
		_, err = cli.RoleGrantPermission(ctx, rest[1], rest[3], clientv3.GetPrefixRangeEnd(rest[3]), clientv3.PermissionType(clientv3.PermReadWrite))
	case cmd == "user add" && len(rest) == 2 && rest[1] == "--interactive=false" && stdin != "":
		_, err = cli.UserAdd(ctx, rest[0], stdin)
		return rest[0], err
	case cmd == "user add" && len(rest) == 2 && rest[1] == "--no-password":
		_, err = cli.UserAddWithOptions(ctx, rest[0], "", &clientv3.UserAddOptions{NoPassword: true})
		return rest[0], err
	case cmd == "user grant-role" && len(rest) == 2:
		_, err = cli.UserGrantRole(ctx, rest[0], rest[1])
	default:
		return "", fmt.Errorf("not a command the test knows")
	}
	return "", err
}

// runRestricted runs a runner of the cluster as the etcd user until it is
// ready, runs one task through it, and stops it.
func runRestricted(t *testing.T, endpoint, cluster, user, password string) {
	t.Helper()
	s3 := testenv.SharedS3(t)
	ak, sk := s3.Credentials()
	cfg, err := runner.Load("", nil, []string{
		"cluster=" + cluster, "runner_id=restricted", "shards=2", "admin_addr=127.0.0.1:0", "log.level=warn", "drain_timeout=5s",
		"etcd.endpoints=" + endpoint, "etcd.username=" + user, "etcd.password=" + password,
		"s3.endpoint=" + s3.Endpoint(), "s3.region=" + s3.Region(), "s3.bucket=" + s3.Bucket(t), "s3.path_style=true",
		"s3.access_key=" + ak, "s3.secret_key=" + sk,
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(cfg, runner.WithTypes(runner.RegisterBuiltins))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			stop()
			<-done
		}
	}()
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Client returns once Run has connected and checked the cluster meta.
	c, err := r.Client(wctx)
	if err != nil {
		t.Fatal(err)
	}
	// Ready as the kubelet sees it: /readyz, registered and attached.
	hc := &http.Client{Timeout: time.Second}
	testenv.WaitFor(t, "the runner's /readyz answering 200", 20*time.Second, func() bool {
		addr := r.AdminAddr()
		if addr == "" {
			return false
		}
		resp, err := hc.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	tk, _, err := c.Submit(wctx, task.SubmitRequest{Type: "echo", Input: []byte(`{"x":1}`)})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if tk, err = c.Wait(wctx, tk.Ref(), 0); err != nil || tk.Status != task.Completed {
		t.Fatalf("task %s: %v (status %v)", tk.Ref(), err, tk.Status)
	}

	stop()
	stopped = true
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runner stop as %s: %v", user, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the runner did not stop within 20s")
	}
}
