//go:build !unix

package bench

import "syscall"

// childAttr has nothing to set where process groups do not exist.
func childAttr() *syscall.SysProcAttr { return nil }
