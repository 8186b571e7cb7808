//go:build !linux

package integration

import "os/exec"

// dieWithParent is a no-op where the kernel has no parent-death signal:
// the test's cleanups kill the children.
func dieWithParent(*exec.Cmd) {}
