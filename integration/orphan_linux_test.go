package integration

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process if the test binary dies
// (a SIGKILL, a `go test -timeout` panic that skips cleanups): without it a
// `tenure run` child would go on holding its lease and shard locks on the
// shared etcd. The signal follows the thread that started the child; the
// Go runtime keeps its threads unless a goroutine locked to one exits,
// which this package's tests never do.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
