//go:build !release

package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/runner"
)

// TestDevS3Coordination: `tenure dev --coordination s3` starts no etcd,
// writes a config with coordination: s3 and no etcd section, and the
// README's commands work against it: task submit --wait, call (echo and
// the durable counter), entity state get, status and config get.
func TestDevS3Coordination(t *testing.T) {
	data := t.TempDir()
	addrs := freeStableAddrs(t, 4)
	cfgPath := filepath.Join(data, "tenure.yaml")
	d := startDev(t, data, addrs, "--coordination", "s3", "-o", "json")

	var ready DevReady
	testenv.WaitFor(t, "tenure dev -o json prints its ready line", 30*time.Second, func() bool {
		for line := range strings.Lines(d.stdout.String()) {
			if strings.HasPrefix(line, `{"event":"ready"`) {
				return json.Unmarshal([]byte(line), &ready) == nil
			}
		}
		return false
	})
	if ready.Coordination != runner.CoordinationS3 || ready.Etcd != "" || len(ready.Runners) != 1 {
		t.Errorf("ready line %+v, want coordination s3, no etcd, one runner", ready)
	}
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "coordination: s3") || strings.Contains(string(raw), "etcd") {
		t.Errorf("the dev config does not say coordination: s3 without an etcd section:\n%s", raw)
	}
	cfg, err := runner.Load(cfgPath, nil, nil)
	if err != nil || cfg.Coordination != runner.CoordinationS3 || len(cfg.Etcd.Endpoints) != 0 {
		t.Fatalf("the dev config loads as coordination %q, etcd %v (%v), want s3 and no endpoints", cfg.Coordination, cfg.Etcd.Endpoints, err)
	}
	// No etcd was started: nothing listens at the address it would have
	// taken.
	if conn, err := net.DialTimeout("tcp", addrs[0], time.Second); err == nil {
		conn.Close()
		t.Errorf("something listens at the etcd address %s: tenure dev --coordination s3 started etcd", addrs[0])
	}

	run := func(fn cmdFunc, args ...string) string {
		t.Helper()
		out, errOut, err := runCmd(t, cfgPath, fn, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	tk := decodeTask(t, run(Task, "submit", "echo", "--input", `{"x":1}`, "--wait", "--json"))
	if tk.Status != task.Completed || string(tk.Result) != `{"x":1}` {
		t.Errorf("task submit echo --wait: status %s, result %s; want completed with {\"x\":1}", tk.Status, tk.Result)
	}
	var echo callJSON
	if out := run(Call, "echo", "e1", "--input", `{"x":1}`, "--json", "--timeout", "30s"); json.Unmarshal([]byte(out), &echo) != nil ||
		string(compact(t, echo.Reply)) != `{"x":1}` {
		t.Errorf("call echo e1 printed\n%s\nwant the reply {\"x\":1}", out)
	}
	for _, want := range []int{2, 4} {
		var got callJSON
		out := run(Call, "counter", "c1", "--input", `{"add":2}`, "--json", "--timeout", "30s")
		if json.Unmarshal([]byte(out), &got) != nil || string(compact(t, got.Reply)) != `{"total":`+strconv.Itoa(want)+`}` {
			t.Fatalf("call counter c1 printed\n%s\nwant the reply {\"total\":%d}", out, want)
		}
	}
	if out := run(Entity, "state", "get", "counter", "c1"); !strings.Contains(out, `"total": 4`) {
		t.Errorf("entity state get counter c1 does not show the total 4:\n%s", out)
	}
	if out := run(Status); !strings.Contains(out, "dev-1") {
		t.Errorf("status does not show the runner dev-1:\n%s", out)
	}
	if out := run(ConfigGet); !strings.Contains(out, "dev-1") {
		t.Errorf("config get does not list the runner dev-1:\n%s", out)
	}
	d.stop(t)

	// Stopped, the cluster's commands name the S3 endpoint that did not
	// answer, not etcd, suggest tenure dev, and fail at once rather than
	// after the S3 client's retries.
	start := time.Now()
	code, _, errOut := mainRun(t, nil, "--config", cfgPath, "status")
	elapsed := time.Since(start)
	if code != 1 || !strings.Contains(errOut, "s3 dial at http://"+addrs[2]) || !strings.Contains(errOut, "connection refused (nothing listens there)") ||
		strings.Contains(errOut, "etcd") || !strings.Contains(errOut, "is the local cluster running? start it with `tenure dev`") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("status with tenure dev --coordination s3 stopped: exit %d, stderr %q", code, errOut)
	}
	if elapsed > 3*time.Second {
		t.Errorf("status with nothing at the S3 endpoint took %s: it waited out the S3 client's retries", elapsed)
	}
}

// TestCoordinationS3Config: with coordination: s3 the commands that need
// only the coordination store ask for no etcd section, need s3.bucket (the
// store is in it), and name the S3 endpoint when it does not answer.
func TestCoordinationS3Config(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noBucket := write("nobucket.yaml", "coordination: s3\n")
	for _, args := range [][]string{{"status"}, {"config", "get"}, {"drain", "r1", "--wait", "0"}} {
		code, _, errOut := mainRun(t, nil, append([]string{"--config", noBucket}, args...)...)
		if code != 1 || !strings.Contains(errOut, "s3.bucket") || strings.Contains(errOut, "etcd.endpoints") {
			t.Errorf("tenure %v with coordination: s3 and no bucket: exit %d, stderr %q; want one naming s3.bucket, not etcd.endpoints", args, code, errOut)
		}
	}
	dead := write("dead.yaml", "coordination: s3\ns3:\n  bucket: b\n  endpoint: http://127.0.0.1:1\n  region: r\n  path_style: true\n  access_key: a\n  secret_key: s\n")
	for _, args := range [][]string{{"status"}, {"task", "list"}} {
		code, _, errOut := mainRun(t, nil, append([]string{"--config", dead}, args...)...)
		if code != 1 || !strings.Contains(errOut, "s3 dial at http://127.0.0.1:1/b") || !strings.Contains(errOut, "nothing listens there") || strings.Contains(errOut, "etcd") {
			t.Errorf("tenure %v with coordination: s3 on a dead endpoint: exit %d, stderr %q; want one naming the S3 endpoint", args, code, errOut)
		}
	}
}
