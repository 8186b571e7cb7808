//go:build windows

package external

import (
	"os"
	"os/exec"
	"syscall"
)

// shellCommand runs command through cmd.exe (%ComSpec%), the shell every
// Windows has: /bin/sh does not exist there. cmd.exe does not split its
// command line the way os/exec quotes arguments (see os/exec's package doc),
// so the line is given verbatim: with /S /C "…", cmd.exe runs what is
// between the outer quotes as typed.
func shellCommand(command string) *exec.Cmd {
	shell := os.Getenv("ComSpec")
	if shell == "" {
		shell = "cmd.exe"
	}
	cmd := exec.Command(shell)
	cmd.SysProcAttr = &syscall.SysProcAttr{CmdLine: syscall.EscapeArg(shell) + ` /S /C "` + command + `"`}
	return cmd
}

// terminate kills the command's own process at once: Windows has no
// SIGTERM to send first (os.Process.Signal supports only Kill there), and
// no process group to send it to. What the command started keeps running;
// the handler stops waiting for its output WaitDelay after the command
// exits. A job object would reach those too, but needs the Windows API
// beyond package syscall.
func terminate(p *os.Process) { _ = p.Kill() }

// kill is terminate: there is nothing stronger to send. After the command
// has exited it does nothing (os.ErrProcessDone).
func kill(p *os.Process) { _ = p.Kill() }
