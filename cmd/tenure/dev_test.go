//go:build !release

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/embedded"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/runner"
)

// devProcess is `tenure dev` running as a process of its own: the test
// binary acting as the tenure command (one embedded S3 gateway per process,
// and the tests' shared one runs in this process).
type devProcess struct {
	cmd    *exec.Cmd
	out    *logBuffer // stdout and stderr, interleaved
	stdout *logBuffer // stdout alone
}

// startDev starts `tenure dev` on data with fixed addresses (the same on a
// restart, as a developer's would be) and waits until its cluster answers.
func startDev(t *testing.T, data string, addrs []string, extra ...string) *devProcess {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(data, "tenure.yaml")
	// The config of a previous start stays: its admin token is kept. The
	// previous process has stopped, so a status that succeeds below
	// reached this one.
	admin := addrs[3][strings.LastIndex(addrs[3], ":")+1:]
	cmd := exec.Command(self, "dev", "--data", data, "--etcd-addr", addrs[0], "--etcd-peer-addr", addrs[1],
		"--s3-addr", addrs[2], "--admin-base-port", admin)
	cmd.Args = append(cmd.Args, extra...)
	cmd.Env = append(os.Environ(), cliMainEnv+"=1")
	d := &devProcess{cmd: cmd, out: &logBuffer{}, stdout: &logBuffer{}}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(d.out, d.stdout), d.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("tenure dev output:\n%s", d.out.String())
		}
	})
	testenv.WaitFor(t, "tenure dev writes its config", 60*time.Second, func() bool {
		_, err := os.Stat(cfgPath)
		return err == nil
	})
	// It writes the cluster meta before its runners start: wait for the
	// line that says they are ready.
	testenv.WaitFor(t, "tenure dev's runners are ready", 60*time.Second, func() bool {
		out := d.stdout.String()
		return strings.Contains(out, "Ctrl-C to stop.") || strings.Contains(out, `{"event":"ready"`)
	})
	if _, _, err := runCmd(t, cfgPath, Status); err != nil {
		t.Fatalf("status of a ready tenure dev: %v", err)
	}
	return d
}

// stop stops it as Ctrl-C would and waits for a clean exit.
func (d *devProcess) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tenure dev exited with %v:\n%s", err, d.out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("tenure dev did not stop within 60s of SIGTERM")
	}
}

// TestDevCounterSurvivesRestart: the acceptance of the built-in counter.
// `tenure call counter c1 --input '{"add":2}' --json` replies {"total":2},
// then {"total":4}; after `tenure dev` is stopped and started again over
// the same data directory, the total is still 4 and counting goes on.
func TestDevCounterSurvivesRestart(t *testing.T) {
	data := t.TempDir()
	addrs := freeStableAddrs(t, 4)
	cfgPath := filepath.Join(data, "tenure.yaml")
	add := func(input string, want int64) {
		t.Helper()
		out, errOut, err := runCmd(t, cfgPath, Call, "counter", "c1", "--input", input, "--json", "--timeout", "30s")
		if err != nil {
			t.Fatalf("tenure call counter c1 --input %s: %v\n%s", input, err, errOut)
		}
		var got callJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil || string(compact(t, got.Reply)) != `{"total":`+strconv.FormatInt(want, 10)+`}` {
			t.Fatalf("tenure call counter c1 --input %s --json printed\n%s\nwant the reply {\"total\":%d}", input, out, want)
		}
	}

	d := startDev(t, data, addrs)
	add(`{"add":2}`, 2)
	add(`{"add":2}`, 4)
	token := devConfigToken(t, cfgPath)
	d.stop(t)
	if !bytes.Contains([]byte(d.out.String()), []byte("runner dev-1")) {
		t.Errorf("tenure dev output does not name its runner:\n%s", d.out.String())
	}

	// Again, with -o json: one ready line, the same admin token.
	d = startDev(t, data, addrs, "-o", "json")
	var ready DevReady
	testenv.WaitFor(t, "tenure dev -o json prints its ready line", 30*time.Second, func() bool {
		for line := range strings.Lines(d.out.String()) {
			if strings.HasPrefix(line, `{"event":"ready"`) {
				return json.Unmarshal([]byte(line), &ready) == nil
			}
		}
		return false
	})
	// Nothing else on stdout, where a script reads the JSON: the logs, and
	// the embedded servers' chatter, go to stderr.
	for line := range strings.Lines(d.stdout.String()) {
		if !json.Valid([]byte(line)) {
			t.Errorf("tenure dev -o json printed a line that is not JSON on stdout: %q", line)
		}
	}
	if ready.Config != cfgPath || len(ready.Runners) != 1 || ready.Runners[0].ID != "dev-1" || ready.Etcd == "" {
		t.Errorf("ready line %+v, want config %s and runner dev-1", ready, cfgPath)
	}
	if got := devConfigToken(t, cfgPath); token == "" || got != token {
		t.Errorf("admin token after a restart %q, want the first one, %q", got, token)
	}
	add(`{}`, 4)
	// tenure dev opens its runners' HTTP entity calls: no token needed,
	// and its config says so to the runners that read it.
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Post("http://"+ready.Runners[0].AdminAddr+"/v1/entities/counter/c1", "application/json", strings.NewReader(`{"add":2}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"total":6}` {
		t.Fatalf("POST /v1/entities/counter/c1 without a token on tenure dev: %d %s, want 200 and the total 6", resp.StatusCode, body)
	}
	if cfg, err := runner.Load(cfgPath, nil, nil); err != nil || !cfg.Call.HTTP.Open {
		t.Errorf("the dev config: call.http.open %v (%v), want true", cfg.Call.HTTP.Open, err)
	}
	add(`{"add":2}`, 8)
	d.stop(t)
}

// devConfigToken returns the admin token of a dev config file.
func devConfigToken(t *testing.T, path string) string {
	t.Helper()
	cfg, err := runner.Load(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Admin.Token
}

// TestDevWithoutRunners is the acceptance on `tenure dev --runners 0`
// (the infrastructure alone), run as processes: `tenure task submit echo
// --wait --wait-timeout 2s` exits 3 soon after its 2s, saying that no
// runner took the task; once the dev cluster is stopped, a command with
// its config fails at once (not after the 5s dial timeout), naming the
// etcd endpoint and suggesting `tenure dev`.
func TestDevWithoutRunners(t *testing.T) {
	data := t.TempDir()
	addrs := freeStableAddrs(t, 4)
	cfgPath := filepath.Join(data, "tenure.yaml")
	d := startDev(t, data, addrs, "--runners", "0")

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "--config", cfgPath, "task", "submit", "echo", "--wait", "--wait-timeout", "2s")
	cmd.Env = append(os.Environ(), cliMainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	elapsed := time.Since(start)
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitTimedOut || !strings.Contains(stderr.String(), `no runner took it: no runner is live in cluster "dev"`) {
		t.Fatalf("tenure task submit echo --wait --wait-timeout 2s: %v\nstdout %s\nstderr %s", err, stdout.String(), stderr.String())
	}
	// The acceptance is 3s on a developer's machine; a loaded test
	// machine gets more room (the process start of a race-built binary
	// is in it).
	if elapsed > 8*time.Second {
		t.Errorf("the process exited after %s", elapsed)
	}
	t.Logf("tenure task submit echo --wait --wait-timeout 2s (a process, no runner) exited 3 after %s", elapsed.Round(time.Millisecond))

	d.stop(t)
	start = time.Now()
	code, _, errOut := mainRun(t, nil, "--config", cfgPath, "status")
	elapsed = time.Since(start)
	if code != 1 || !strings.Contains(errOut, "etcd dial at http://"+addrs[0]) || !strings.Contains(errOut, "connection refused (nothing listens there)") ||
		!strings.Contains(errOut, "is the local cluster running? start it with `tenure dev`") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("status with tenure dev stopped: exit %d, stderr %q", code, errOut)
	}
	if elapsed > 3*time.Second {
		t.Errorf("status with nothing at the etcd endpoint took %s: it waited out the dial timeout", elapsed)
	}
	t.Logf("status with tenure dev stopped failed after %s", elapsed.Round(time.Millisecond))
}

// TestDevToken: a data directory keeps its admin token; a new one gets a
// random 32-byte token.
func TestDevToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenure.yaml")
	a, err := devToken(path)
	if err != nil || len(a) != 64 {
		t.Fatalf("new token %q (%v), want 64 hex digits", a, err)
	}
	b, _ := devToken(path)
	if a == b {
		t.Errorf("two new data directories got the same token %s", a)
	}
	cfg := runner.DefaultConfig()
	cfg.Admin.Token = a
	if err := writeDevConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	if again, err := devToken(path); err != nil || again != a {
		t.Errorf("token of an existing config: %q (%v), want %q", again, err, a)
	}
	loaded, err := runner.Load(path, nil, []string{"s3.bucket=x", "etcd.endpoints=http://127.0.0.1:1"})
	if err != nil || loaded.Admin.Token != a {
		t.Errorf("the written config loads with admin.token %q (%v), want %q", loaded.Admin.Token, err, a)
	}
}

// freeStableAddrs returns n addresses that stay free across a restart of
// tenure dev (embedded.FreeStableAddr).
func freeStableAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		a, err := embedded.FreeStableAddr()
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, a)
	}
	return addrs
}
