package external

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv/poll"
)

func TestExecHandler(t *testing.T) {
	ctx := handlerCtx(t)
	t.Setenv("TENURE_S3_SECRET_KEY", "hunter2")
	run := func(ctx context.Context, command string, tk *task.Task) (json.RawMessage, error) {
		t.Helper()
		h, err := NewHandler("exec:"+command, nil)
		if err != nil {
			t.Fatal(err)
		}
		return h(ctx, tk)
	}

	if out, err := run(ctx, "cat", handlerTask(`{"a": [1, 2]}`)); err != nil || string(out) != `{"a": [1, 2]}` {
		t.Errorf("cat: %s, %v; want the input back", out, err)
	}
	out, err := run(ctx, `printf '{"id":"%s","ref":"%s","type":"%s","entity":"%s","attempt":%s,"secret":"%s"}' `+
		`"$TENURE_TASK_ID" "$TENURE_TASK_REF" "$TENURE_TASK_TYPE" "$TENURE_TASK_ENTITY" "$TENURE_TASK_ATTEMPT" "${TENURE_S3_SECRET_KEY:-}"`, handlerTask(""))
	want := `{"id":"t-1","ref":"default/3/t-1","type":"job","entity":"acct-7","attempt":2,"secret":""}`
	if err != nil || string(out) != want {
		t.Errorf("environment: %s, %v; want %s (and no TENURE_* config)", out, err, want)
	}
	if out, err := run(ctx, "true", handlerTask("")); err != nil || string(out) != "null" {
		t.Errorf("no stdout: %s, %v; want null", out, err)
	}

	_, err = run(ctx, "echo 'db locked' >&2; exit 75", handlerTask(""))
	if err == nil || entity.IsPermanent(err) || !strings.Contains(err.Error(), "db locked") {
		t.Errorf("exit 75: err = %v, want a retryable failure with stderr", err)
	}
	_, err = run(ctx, "printf 'HEAD%3000s' x >&2; printf 'TAIL' >&2; exit 3", handlerTask(""))
	if !entity.IsPermanent(err) || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "TAIL") || strings.Contains(err.Error(), "HEAD") {
		t.Errorf("exit 3: err = %v, want permanent with the last KiB of stderr", err)
	}
	if len(err.Error()) > 2*handlerErrorTail {
		t.Errorf("exit 3: error is %d bytes, want about 1 KiB", len(err.Error()))
	}
	if _, err := run(ctx, "echo not json", handlerTask("")); !entity.IsPermanent(err) || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("non-JSON stdout: err = %v, want permanent", err)
	}
	if _, err := run(ctx, fmt.Sprintf(`printf '"%%%ds"' x`, MaxHandlerResult), handlerTask("")); !entity.IsPermanent(err) || !strings.Contains(err.Error(), "over") {
		t.Errorf("huge stdout: err = %v, want permanent", err)
	}
	// Input larger than a pipe buffer, never read: no hang, no failure.
	big := `"` + strings.Repeat("b", 1<<20) + `"`
	if out, err := run(ctx, "echo 1", handlerTask(big)); err != nil || string(out) != "1" {
		t.Errorf("unread input: %s, %v", out, err)
	}

	// Processes left behind in the command's group die with it.
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "bg.pid")
	if _, err := run(ctx, "sleep 30 >/dev/null 2>&1 & echo $! > "+pidFile, handlerTask("")); err != nil {
		t.Fatal(err)
	}
	waitDead(t, readPid(t, pidFile))
}

func TestExecHandlerInterrupted(t *testing.T) {
	ctx := handlerCtx(t)
	dir := t.TempDir()

	// SIGTERM ends a plain command at once.
	started := filepath.Join(dir, "started")
	cctx, cancel := context.WithCancelCause(ctx)
	interrupted := errors.New("detached")
	result := make(chan error, 1)
	h, err := NewHandler("exec:touch "+started+"; sleep 30", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := h(cctx, handlerTask(""))
		result <- err
	}()
	waitFile(t, started)
	start := time.Now()
	cancel(interrupted)
	select {
	case err := <-result:
		if !errors.Is(err, interrupted) {
			t.Errorf("err = %v, want the interruption cause", err)
		}
		if d := time.Since(start); d > ExecKillGrace {
			t.Errorf("sleep 30 took %s to end after SIGTERM", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command was not killed when its task was interrupted")
	}

	// A command that ignores SIGTERM is killed, with its children, after
	// the grace.
	pidFile := filepath.Join(dir, "child.pid")
	const grace = 300 * time.Millisecond
	h = execHandler("trap '' TERM; sleep 30 & echo $! > "+pidFile+"; wait", grace)
	cctx, cancel = context.WithCancelCause(ctx)
	go func() {
		_, err := h(cctx, handlerTask(""))
		result <- err
	}()
	waitFile(t, pidFile)
	child := readPid(t, pidFile)
	start = time.Now()
	cancel(interrupted)
	select {
	case err := <-result:
		d := time.Since(start)
		if !errors.Is(err, interrupted) {
			t.Errorf("err = %v, want the interruption cause", err)
		}
		if d < grace {
			t.Errorf("returned %s after SIGTERM, before the %s grace: was TERM not ignored?", d, grace)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a TERM-ignoring command was not killed")
	}
	waitDead(t, child)

	// The task's timeout ends the command too, as a retryable failure.
	tk := handlerTask("")
	tk.Timeout = task.Duration(200 * time.Millisecond)
	start = time.Now()
	_, err = execHandler("sleep 30", grace)(ctx, tk)
	if !errors.Is(err, errHandlerTimeout) || entity.IsPermanent(err) {
		t.Errorf("timeout: err = %v, want a retryable timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timeout took %s", d)
	}
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	poll.For(t, path+" to exist", 10*time.Second, func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// readPid waits until path holds a process id, and returns it.
func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	poll.For(t, "a pid in "+path, 10*time.Second, func() bool {
		b, _ := os.ReadFile(path)
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		pid = n
		return err == nil && n > 0
	})
	return pid
}

// waitDead waits until pid has exited (a zombie counts: it runs nothing).
func waitDead(t *testing.T, pid int) {
	t.Helper()
	poll.For(t, fmt.Sprintf("process %d to exit", pid), 10*time.Second, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		_, rest, ok := strings.Cut(string(b), ") ")
		return ok && strings.HasPrefix(rest, "Z")
	})
}
