package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/runner"
)

// child is a `tenure run` process of a cluster.
type child struct {
	id      string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // Wait's, once done is closed
}

// executable returns the tenure binary to start runners from.
func (e *env) executable() (string, error) {
	if e.exe != "" {
		return e.exe, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("bench: finding the tenure binary for runner processes: %w", err)
	}
	return exe, nil
}

// startChild starts runner id as a child process: `tenure run` with the
// cluster's settings, and extra config overrides (key=value) of its own,
// in TENURE_* variables, its output in a log file.
func (c *cluster) startChild(id string, extra ...string) (*child, error) {
	e := c.env
	exe, err := e.executable()
	if err != nil {
		return nil, err
	}
	if _, err := c.config(id, extra...); err != nil { // refuse bad settings here, not in the child's log
		return nil, err
	}
	// An empty config file: the settings come from the environment, and
	// the path marks the process as this run's (see the tests).
	cfgPath := filepath.Join(e.dir, "runner.yaml")
	if err := os.WriteFile(cfgPath, []byte("# tenure bench: runner settings are in TENURE_* variables\n"), 0o644); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	log, err := e.logFile(safeName(c.Name + "-" + id + ".log"))
	if err != nil {
		return nil, err
	}
	ch := &child{id: id, logPath: log.Name(), done: make(chan struct{})}
	ch.cmd = exec.Command(exe, "run", "--config", cfgPath, "--runner-id", id)
	ch.cmd.Stdout, ch.cmd.Stderr = log, log
	ch.cmd.Env = childEnv(append(slices.Clone(c.overrides), extra...))
	ch.cmd.SysProcAttr = childAttr()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := ch.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: starting runner %s (%s run): %w", id, exe, err)
	}
	e.procs[ch] = struct{}{}
	go func() {
		ch.err = ch.cmd.Wait()
		close(ch.done)
		e.mu.Lock()
		delete(e.procs, ch)
		e.mu.Unlock()
	}()
	return ch, nil
}

// childEnv is the process environment without TENURE_* variables (which
// would change the runners' settings), plus the cluster's settings.
func childEnv(overrides []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, runner.EnvPrefix) {
			env = append(env, kv)
		}
	}
	for _, kv := range overrides {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, runner.EnvName(k)+"="+v)
	}
	return env
}

// signal sends sig to the process.
func (ch *child) signal(sig syscall.Signal) error {
	if err := ch.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("bench: signalling runner %s (pid %d): %w", ch.id, ch.cmd.Process.Pid, err)
	}
	return nil
}

// exited reports whether the process has ended.
func (ch *child) exited() bool {
	select {
	case <-ch.done:
		return true
	default:
		return false
	}
}

// wait waits up to within for the process to end and returns its exit
// code (-1 when killed by a signal).
func (ch *child) wait(ctx context.Context, within time.Duration) (int, error) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-ch.done:
	case <-timer.C:
		return 0, fmt.Errorf("bench: runner %s (pid %d) did not exit within %s (log %s)", ch.id, ch.cmd.Process.Pid, within, ch.logPath)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	var ee *exec.ExitError
	switch {
	case ch.err == nil:
		return 0, nil
	case errors.As(ch.err, &ee):
		return ee.ExitCode(), nil
	}
	return 0, fmt.Errorf("bench: runner %s: %w", ch.id, ch.err)
}

// stop ends the process: SIGTERM (a graceful stop), then SIGKILL when it
// has not exited within grace.
func (ch *child) stop(grace time.Duration) {
	if ch.exited() {
		return
	}
	ch.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ch.done:
		return
	case <-time.After(grace):
	}
	ch.cmd.Process.Kill()
	<-ch.done
}

// killChildren kills every child process still running and reaps it.
func (e *env) killChildren() {
	e.mu.Lock()
	var procs []*child
	for ch := range e.procs {
		procs = append(procs, ch)
	}
	e.mu.Unlock()
	for _, ch := range procs {
		ch.cmd.Process.Kill()
	}
	for _, ch := range procs {
		<-ch.done
	}
}
