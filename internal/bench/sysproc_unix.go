//go:build unix && !linux

package bench

import "syscall"

// childAttr puts a runner process in its own process group, so that a
// Ctrl-C in the terminal reaches only the bench, which stops its children
// itself.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
