package external

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
)

// execHandler runs command for each task. How the command is started and
// stopped depends on the platform (shellCommand, terminate and kill, in
// exec_unix.go, exec_windows.go and exec_other.go); the rest is the same
// everywhere.
func execHandler(command string, grace time.Duration) entity.HandlerFunc {
	return func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		limit := attemptTimeout(t)
		ctx, cancel := context.WithTimeoutCause(ctx, limit, fmt.Errorf("%w: command still running after the task timeout %s", errHandlerTimeout, limit))
		defer cancel()
		stdout := &capBuffer{max: MaxHandlerResult}
		stderr := &tailBuffer{max: handlerErrorTail}
		cmd := shellCommand(command)
		cmd.Stdin = bytes.NewReader(t.Input)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.Env = taskEnv(ctx, os.Environ(), t)
		// A process that escapes the group (setsid), or one the platform
		// cannot kill with the command (Windows), may hold stdout open:
		// stop waiting for it this long after the command exits.
		cmd.WaitDelay = grace + time.Second
		// Last thing before the command starts: a runner paused past its
		// lease must not start it on resuming (see entity.Attached).
		if err := entity.Attached(ctx); err != nil {
			return nil, err
		}
		err := runGroup(ctx, cmd, grace)
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause
		}
		var exitErr *exec.ExitError
		switch {
		case err == nil || errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success():
			if stdout.over {
				return nil, entity.Permanent(fmt.Errorf("exec handler: stdout is over %d bytes", MaxHandlerResult))
			}
			return result("exec handler: stdout", stdout.buf.Bytes())
		case errors.As(err, &exitErr) && exitErr.Exited():
			code := exitErr.ExitCode()
			if code == ExecExitRetry {
				return nil, fmt.Errorf("exec handler: exit status %d (retrying): %s", code, stderr.text())
			}
			return nil, entity.Permanent(fmt.Errorf("exec handler: exit status %d: %s", code, stderr.text()))
		case errors.As(err, &exitErr):
			// Killed by a signal Tenure did not send (OOM killer, an
			// operator): like a crash, worth another attempt.
			return nil, fmt.Errorf("exec handler: %v (retrying): %s", err, stderr.text())
		default:
			return nil, fmt.Errorf("exec handler: %w", err)
		}
	}
}

// runGroup starts cmd (made by shellCommand) and waits for it to exit.
// When ctx ends first the command's group gets terminate, then kill after
// grace; whatever the command left running in its group is killed when it
// exits. A start failure is returned as "start NAME: …".
func runGroup(ctx context.Context, cmd *exec.Cmd, grace time.Duration) error {
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Args[0], err)
	}
	proc := cmd.Process
	exited := make(chan struct{})
	go func() {
		select {
		case <-exited:
			return
		case <-ctx.Done():
		}
		terminate(proc)
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-exited:
		case <-timer.C:
			kill(proc)
		}
	}()
	err := cmd.Wait()
	close(exited)
	kill(proc)
	return err
}

// taskEnv is the command's environment: the runner's without its TENURE_*
// configuration and trace context, plus the task's identity and the trace
// context of ctx (the attempt's execute span) in TRACEPARENT, TRACESTATE
// and BAGGAGE, the environment carriers OpenTelemetry specifies, so that
// the command's own spans join the task's trace.
func taskEnv(ctx context.Context, environ []string, t *task.Task) []string {
	env := append(commandEnv(environ, 8),
		runner.TaskEnvPrefix+"ID="+t.ID,
		runner.TaskEnvPrefix+"REF="+t.Ref(),
		runner.TaskEnvPrefix+"TYPE="+t.Type,
		runner.TaskEnvPrefix+"ENTITY="+t.Entity,
		runner.TaskEnvPrefix+"ATTEMPT="+strconv.Itoa(t.Attempt),
	)
	carrier := propagation.MapCarrier{}
	traceEnv.Inject(ctx, carrier)
	for _, k := range carrier.Keys() {
		env = append(env, strings.ToUpper(k)+"="+carrier.Get(k))
	}
	return env
}

// traceEnv is how the trace context reaches a command: the W3C formats,
// whatever the global propagator is (as the http: handler's headers).
var traceEnv = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// commandEnv is environ without the runner's TENURE_* configuration, which
// may hold credentials, and without the trace context the runner itself
// was started with, which is not the command's; with room for extra more
// variables.
func commandEnv(environ []string, extra int) []string {
	env := make([]string, 0, len(environ)+extra)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(kv, runner.EnvPrefix) || name == "TRACEPARENT" || name == "TRACESTATE" || name == "BAGGAGE" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// capBuffer keeps the first max bytes written and notes whether there was
// more; it never fails a write, so the command is not killed by EPIPE.
type capBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if len(p) > room {
		c.over = true
	}
	c.buf.Write(p[:min(max(room, 0), len(p))])
	return len(p), nil
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	buf []byte
	max int
	cut bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
		b.cut = true
	}
	return len(p), nil
}

func (b *tailBuffer) text() string {
	s := strings.TrimSpace(string(b.buf))
	if s == "" {
		return "(no stderr)"
	}
	if b.cut {
		return "stderr …" + strconv.Quote(s)
	}
	return "stderr " + strconv.Quote(s)
}
