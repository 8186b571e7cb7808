package bench

import "syscall"

// childAttr puts a runner process in its own process group, so that a
// Ctrl-C in the terminal reaches only the bench (which stops its children
// itself), and has the kernel kill it if the bench dies without doing so.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
