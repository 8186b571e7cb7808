package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/runner"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testConfig is a runner config for a cluster of its own on the shared
// etcd and S3 servers.
func testConfig(t *testing.T, runnerID string, overrides ...string) runner.Config {
	t.Helper()
	srv, s3 := testenv.SharedEtcd(t), testenv.SharedS3(t)
	ak, sk := s3.Credentials()
	cfg, err := runner.Load("", nil, append([]string{
		"cluster=" + testenv.Name(t, 40), "runner_id=" + runnerID, "shards=8", "admin_addr=127.0.0.1:0",
		"etcd.endpoints=" + srv.Endpoint(),
		"s3.endpoint=" + s3.Endpoint(), "s3.region=" + s3.Region(), "s3.bucket=" + s3.Bucket(t), "s3.path_style=true",
		"s3.access_key=" + ak, "s3.secret_key=" + sk,
		"drain_timeout=10s", "log.level=warn",
	}, overrides...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// started is a service serving on a loopback port.
type started struct {
	svc  *service
	url  string
	stop func(t *testing.T) // cancels serve and checks it returned nil
}

func startService(t *testing.T, cfg runner.Config) *started {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := newService(cfg, log, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc.close()
		t.Fatal(err)
	}
	run := harness.Go(func(ctx context.Context) error { return svc.serve(ctx, ln) })
	s := &started{svc: svc, url: "http://" + ln.Addr().String()}
	s.stop = func(t *testing.T) {
		if !run.Running() {
			return
		}
		defer svc.close()
		switch err := run.Stop(30 * time.Second); {
		case errors.Is(err, harness.ErrStopTimeout):
			t.Error("serve did not return within 30s of its context ending")
		case err != nil:
			t.Errorf("serve: %v", err)
		}
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// post sends POST path with an optional Idempotency-Key and decodes the
// JSON reply.
func (s *started) post(t *testing.T, path, key string) (int, map[string]any) {
	t.Helper()
	code, body, err := s.tryPost(path, key)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

// tryPost is post for goroutines other than the test's.
func (s *started) tryPost(path, key string) (int, map[string]any, error) {
	req, err := http.NewRequest(http.MethodPost, s.url+path, nil)
	if err != nil {
		return 0, nil, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(b, &body); err != nil {
			return 0, nil, fmt.Errorf("POST %s: %d %s: %w", path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode, body, nil
}

// add adds n to counter id through the API and returns the reply, failing
// the test unless it is a 200 with a total.
func (s *started) add(t *testing.T, id, n, key string) (total int64, body map[string]any) {
	t.Helper()
	code, body := s.post(t, "/counters/"+id+"/add?n="+n, key)
	tot, ok := body["total"].(float64)
	if code != http.StatusOK || !ok {
		t.Fatalf("add %s to %s: %d %v", n, id, code, body)
	}
	return int64(tot), body
}

// TestAPIAddsUp runs the service against real etcd and S3: each counter
// keeps its own total across adds, concurrent adds to one counter are
// applied one at a time (every intermediate total is seen exactly once), an
// Idempotency-Key makes a retried request return the first one's result
// instead of adding again, and the service stops cleanly on cancel, leaving
// no goroutine of the module behind.
func TestAPIAddsUp(t *testing.T) {
	testenv.CheckLeaks(t)
	cfg := testConfig(t, "counter-test")
	s := startService(t, cfg)

	// The first request also waits for the runner to start and own its
	// shards: the task is durable from submission, so it runs then.
	steps := []struct {
		id, n string
		want  int64
	}{
		{"a", "3", 3}, {"a", "4", 7}, {"b", "10", 10}, {"a", "-2", 5}, {"b", "1", 11},
	}
	for _, st := range steps {
		got, body := s.add(t, st.id, st.n, "")
		if got != st.want || body["counter"] != st.id || body["runner"] != "counter-test" || body["task"] == "" {
			t.Fatalf("add %s to %s: total %d (want %d), reply %v", st.n, st.id, got, st.want, body)
		}
	}

	const parallel = 8
	totals := make([]int64, parallel)
	var wg sync.WaitGroup
	for i := range parallel {
		wg.Go(func() {
			code, body, err := s.tryPost("/counters/c/add?n=1", "")
			if tot, ok := body["total"].(float64); err == nil && code == http.StatusOK && ok {
				totals[i] = int64(tot)
			} else {
				t.Errorf("concurrent add %d: %d %v %v", i, code, body, err)
			}
		})
	}
	wg.Wait()
	slices.Sort(totals)
	for i, got := range totals {
		if got != int64(i+1) {
			t.Fatalf("concurrent adds to c: totals %v, want each of 1..%d once", totals, parallel)
		}
	}

	first, b1 := s.add(t, "d", "5", "order-17")
	again, b2 := s.add(t, "d", "5", "order-17")
	if first != 5 || again != 5 || b1["task"] != b2["task"] {
		t.Fatalf("idempotent retry: %v then %v, want the same task with total 5", b1, b2)
	}
	if code, body := s.post(t, "/counters/d/add?n=6", "order-17"); code != http.StatusConflict {
		t.Fatalf("reusing a key with another n: %d %v, want 409", code, body)
	}
	if got, _ := s.add(t, "d", "1", ""); got != 6 {
		t.Fatalf("d after the idempotent retry: %d, want 6 (5 added once, then 1)", got)
	}
	s.stop(t)
}

// TestCountSurvivesPassivationAndRestart: the count is durable state.
// Once the instance has been passivated for idleness (seen in the runner's
// tenure_entity_passivations_total{reason="idle"}), the next task's fresh
// instance loads the total from S3; after the service — the cluster's only
// runner — stops and a new one starts over the same etcd and S3, the
// totals are still there.
func TestCountSurvivesPassivationAndRestart(t *testing.T) {
	cfg := testConfig(t, "counter-idle", "entity.max_idle=500ms")
	s := startService(t, cfg)
	if got, _ := s.add(t, "e", "3", ""); got != 3 {
		t.Fatalf("first add: total %d, want 3", got)
	}
	testenv.WaitFor(t, "an idle passivation (entity.max_idle=500ms)", 20*time.Second, func() bool {
		return passivations(t, s.svc.runner.Registry(), "idle") >= 1
	})
	if got, _ := s.add(t, "e", "1", ""); got != 4 {
		t.Fatalf("add after passivation: total %d, want 4 (loaded from S3)", got)
	}
	if got, _ := s.add(t, "f", "10", ""); got != 10 {
		t.Fatalf("first add to f: total %d, want 10", got)
	}
	s.stop(t)

	cfg.RunnerID = "counter-restarted"
	s = startService(t, cfg)
	if got, body := s.add(t, "e", "1", ""); got != 5 || body["runner"] != "counter-restarted" {
		t.Fatalf("add after the restart: total %d, reply %v; want 5 from counter-restarted", got, body)
	}
	if got, _ := s.add(t, "f", "-1", ""); got != 9 {
		t.Fatalf("add to f after the restart: total %d, want 9", got)
	}
}

// passivations reads tenure_entity_passivations_total{reason} from reg.
func passivations(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tenure_entity_passivations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestAPIRejectsBadRequests: requests the API cannot turn into a task get a
// 400 with a JSON error naming what is wrong; a GET is a 405.
func TestAPIRejectsBadRequests(t *testing.T) {
	cfg := testConfig(t, "counter-bad")
	s := startService(t, cfg)
	cases := []struct {
		path, key, want string
	}{
		{"/counters/a/add", "", "n is missing"},
		{"/counters/a/add?n=abc", "", `n = "abc"`},
		{"/counters/a/add?n=1.5", "", `n = "1.5"`},
		{"/counters/a/add?n=2000000000", "", "want an integer in"},
		{"/counters/a/add?n=1", "a.b", "Idempotency-Key"},
		{"/counters/%01/add?n=1", "", "counter id"},
	}
	for _, c := range cases {
		code, body := s.post(t, c.path, c.key)
		msg, _ := body["error"].(string)
		if code != http.StatusBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("POST %s (key %q): %d %v, want 400 naming %q", c.path, c.key, code, body, c.want)
		}
	}
	resp, err := http.Get(s.url + "/counters/a/add?n=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", resp.StatusCode)
	}
}

// TestDecodeAdd: the counter accepts exactly {"add": N} within bounds, and
// refuses anything else as a permanent failure (a retry would not help).
func TestDecodeAdd(t *testing.T) {
	for in, want := range map[string]int64{`{"add":2}`: 2, `{"add": -40}`: -40, `{"add":0}`: 0} {
		if n, err := decodeAdd(json.RawMessage(in)); err != nil || n != want {
			t.Errorf("%s: %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{``, `{}`, `{"add":"1"}`, `{"add":1,"sub":2}`, `{"add":1} {"add":1}`, `{"add":1000000001}`, `[1]`} {
		_, err := decodeAdd(json.RawMessage(in))
		if !errors.Is(err, errBadInput) || !entity.IsPermanent(err) {
			t.Errorf("input %q: %v, want a permanent errBadInput", in, err)
		}
	}
}

// TestMainRejectsBadFlags: bad flags and a missing config file fail before
// anything connects, with one clear error.
func TestMainRejectsBadFlags(t *testing.T) {
	t.Chdir(t.TempDir())
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--wait", "0s"}, "--wait 0s"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{nil, "tenure dev --runners 0"},
		{[]string{"--config", "missing.yaml"}, "missing.yaml"},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		err := mainErr(c.args, &stderr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("counter %v: %v, want an error naming %q", c.args, err, c.want)
		}
	}
}
