//go:build !linux

package messaging

import "syscall"

// peerGone cannot read the socket's state on this platform: only a failed
// write stops a connection's writes (trackedConn).
func peerGone(syscall.RawConn) bool { return false }
