package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// TestSubmitWaitTimeout: submit --wait is bounded by --wait-timeout; when
// it runs out the command exits 3, prints the task as it stands and says
// why no runner took it: none live, none holding its shard, or which one
// holds it.
func TestSubmitWaitTimeout(t *testing.T) {
	c := newCLICluster(t, true)

	start := time.Now()
	out, errOut, err := c.run(Task, "submit", "echo", "--wait", "--wait-timeout", "2s")
	elapsed := time.Since(start)
	if code := exitCode(err); code != exitTimedOut {
		t.Fatalf("submit --wait-timeout 2s with no runner: exit %d (%v), want %d", code, err, exitTimedOut)
	}
	assertOneLine(t, "no runner", err, fmt.Sprintf(`: still pending (attempt 0 of 5): no runner took it: no runner is live in cluster %q`, c.name))
	if !strings.HasPrefix(err.Error(), "timed out after 2s waiting for task default/") || !strings.Contains(err.Error(), "it stays submitted (tenure task get default/") {
		t.Errorf("timeout error %q", err)
	}
	if !strings.Contains(out, "pending") || !strings.Contains(errOut, "no runner is live") {
		t.Errorf("stdout %q (want the pending task), stderr %q (want the submit's warning)", out, errOut)
	}
	// The wait is the bound; what follows is one etcd read.
	if elapsed < 2*time.Second || elapsed > 12*time.Second {
		t.Errorf("submit --wait-timeout 2s returned after %s", elapsed)
	}
	t.Logf("submit --wait --wait-timeout 2s with no runner returned after %s", elapsed.Round(time.Millisecond))

	// Through Main: exit status 3, the error as the last line.
	code, _, errOut := mainRun(t, nil, "--config", c.cfgPath, "task", "submit", "echo", "--wait-timeout", "300ms")
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if code != exitTimedOut || !strings.HasPrefix(lines[len(lines)-1], "tenure task submit: timed out after 300ms waiting for task") {
		t.Errorf("tenure task submit --wait-timeout 300ms (implying --wait): exit %d, stderr %q", code, errOut)
	}

	// A runner is live but holds no lock on the task's shard.
	ctx := testCtx(t, 30*time.Second)
	ghost, err := c.etcd.Register(ctx, storage.RunnerInfo{ID: "ghost", Weight: 1, Groups: []string{"default"}}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ghost.Close(context.Background()) })
	go storage.KeepAliveLoop(context.Background(), ghost, storage.KeepAliveCadence{}, nil)
	shard := task.ShardOf("default", cliShards, "echo", "e1", "")
	_, _, err = c.run(Task, "submit", "echo", "--entity", "e1", "--wait", "--wait-timeout", "300ms")
	assertOneLine(t, "no holder", err, fmt.Sprintf("no runner took it: no runner holds its shard %s (1 runner(s) live", shard))
	// It holds the shard, but runs nothing.
	if res, err := ghost.AcquireShards(ctx, []storage.ShardID{shard}); err != nil || res[0].Status != storage.Acquired {
		t.Fatalf("acquire %s: %+v, %v", shard, res, err)
	}
	_, _, err = c.run(Task, "submit", "echo", "--entity", "e1", "--wait", "--wait-timeout", "300ms")
	assertOneLine(t, "idle holder", err, fmt.Sprintf(`runner ghost holds its shard %s but has not started it (busy, or no handler for type "echo")`, shard))
	if code := exitCode(err); code != exitTimedOut {
		t.Errorf("idle holder: exit %d, want %d", code, exitTimedOut)
	}

	if _, _, err := c.run(Task, "submit", "echo", "--wait-timeout", "-1s"); exitCode(err) != 2 {
		t.Errorf("--wait-timeout -1s: %v, want a usage error", err)
	}
}

// stampedWriter records when each line was written.
type stampedWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first time.Time
}

func (w *stampedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() {
		w.first = time.Now()
	}
	return w.buf.Write(p)
}

// TestCallWarnsEarly: a call to an entity whose shard no runner holds
// says so on stderr well before its timeout, and its error says it too.
func TestCallWarnsEarly(t *testing.T) {
	c := newCLICluster(t, true)
	var out bytes.Buffer
	errOut := &stampedWriter{}
	cli := &CLI{Stdout: &out, Stderr: errOut, ConfigPath: c.cfgPath, Environ: []string{"USER=tester"}, Version: "test"}
	start := time.Now()
	err := Call(testCtx(t, 60*time.Second), cli, []string{"counter", "c1", "--input", `{"add":1}`, "--timeout", "4s"})
	elapsed := time.Since(start)
	assertOneLine(t, "call with no runner", err, fmt.Sprintf("no runner is live in cluster %q", c.name))
	warning := errOut.buf.String()
	if !strings.HasPrefix(warning, fmt.Sprintf("warning: no runner is live in cluster %q", c.name)) || !strings.Contains(warning, "up to its timeout (4s)") {
		t.Fatalf("stderr %q, want the warning", warning)
	}
	warnedAfter := errOut.first.Sub(start)
	// It comes half a second in; a loaded machine may add to that, but
	// not the call's whole timeout.
	if warnedAfter < callWarnDelay || warnedAfter > 3*time.Second {
		t.Errorf("the warning came %s into a 4s call", warnedAfter)
	}
	t.Logf("warned %s into the call; the call failed after %s", warnedAfter.Round(time.Millisecond), elapsed.Round(time.Millisecond))
}
