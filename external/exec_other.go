//go:build !unix && !windows

package external

import (
	"os"
	"os/exec"
)

// shellCommand runs command through /bin/sh -c, as on Unix, where the
// platform (Plan 9, js/wasm, wasip1) offers one; where it does not, or
// cannot start processes at all, the task fails with the start error.
// These platforms have no process groups to put the command in.
func shellCommand(command string) *exec.Cmd { return exec.Command("/bin/sh", "-c", command) }

// terminate kills the command's own process: without process groups (and,
// on most of these platforms, signals) there is no gentler request to
// send, nor a group to send it to.
func terminate(p *os.Process) { _ = p.Kill() }

// kill is terminate: there is nothing stronger to send. After the command
// has exited it does nothing (os.ErrProcessDone).
func kill(p *os.Process) { _ = p.Kill() }
