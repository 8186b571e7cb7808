//go:build unix

package external

import (
	"os"
	"os/exec"
	"syscall"
)

// shellCommand runs command through /bin/sh -c as the leader of a new
// process group, so that terminate and kill reach everything the command
// starts (a pipeline, a background job), not only the shell.
func shellCommand(command string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// terminate asks the command's process group to stop: SIGTERM, which a
// command may catch to clean up within the grace.
func terminate(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGTERM) }

// kill ends the command's process group: SIGKILL. After the command has
// exited it still reaches what it left running in its group (the group id
// is its pid, which no new process gets while the group has members).
func kill(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }
