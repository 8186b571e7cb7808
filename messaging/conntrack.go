package messaging

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// errPeerClosed is the error of a write this process refused to make: the
// runner had already closed the connection.
var errPeerClosed = fmt.Errorf("messaging: the runner closed the connection: write not made: %w", syscall.EPIPE)

// trackedConn is a pooled connection's socket. It numbers every write on
// the pool entry's sequence and stops writing for good once the peer is
// known to be gone, so that a call can prove its request never left this
// process even when grpc had already handed it to the connection (see
// sendProbe).
//
// Why this is needed: when a runner dies (SIGKILL), its kernel closes the
// socket and the FIN (or RST) is in this side's receive queue at once, but
// grpc notices only when its reader goroutine next runs. A call made in
// between is queued on the connection as on a live one; without this, its
// bytes were written to the dead socket and the call ended "outcome
// unknown: error reading from server: EOF" although nothing could have run
// it.
//
// Why refusing to write is safe: HTTP/2 has no half-closed connection. A
// peer that sent FIN can send nothing more — no reply, no refusal — so a
// request written after it could only end unknown; a peer that reset the
// connection discards what arrives. Not writing loses nothing, and keeps
// the request provably unsent. What the peer sent before its FIN is still
// read: the socket stays open for grpc's reader, which drains it and then
// closes the transport as usual.
type trackedConn struct {
	net.Conn
	raw syscall.RawConn // nil when the socket exposes none: only write errors count
	seq *atomic.Uint64  // the pool entry's write sequence, shared by its sockets

	mu   sync.Mutex    // serialises writes with the check before them
	dead atomic.Bool   // no write is made any more
	last atomic.Uint64 // once dead: no write numbered above it reached the socket
}

func newTrackedConn(c net.Conn, seq *atomic.Uint64) *trackedConn {
	t := &trackedConn{Conn: c, seq: seq}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			t.raw = raw
		}
	}
	return t
}

// Write writes b unless the connection is dead or its peer is gone. A
// failed write kills the connection too: its bytes may have left, but no
// later write's do.
func (t *trackedConn) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.seq.Add(1)
	if t.dead.Load() {
		return 0, errPeerClosed
	}
	if peerGone(t.raw) {
		t.kill(n - 1)
		return 0, errPeerClosed
	}
	w, err := t.Conn.Write(b)
	if err != nil {
		t.kill(n)
	}
	return w, err
}

func (t *trackedConn) kill(last uint64) {
	t.last.Store(last)
	t.dead.Store(true)
}

// unwrittenAfter reports whether no write numbered above seq reached the
// socket: true once the connection died at or before seq.
func (t *trackedConn) unwrittenAfter(seq uint64) bool {
	return t.dead.Load() && t.last.Load() <= seq
}

// LocalAddr names the socket's local address and carries t, so that the
// stats handler learns which socket a call's stream went to (grpc reports
// the transport's LocalAddr in stats.OutHeader).
func (t *trackedConn) LocalAddr() net.Addr { return trackedAddr{t.Conn.LocalAddr(), t} }

// trackedAddr is a socket's local address and its trackedConn.
type trackedAddr struct {
	net.Addr
	conn *trackedConn
}

// dialTracked dials addr over TCP and tracks the socket on seq. ctx bounds
// the dial (grpc gives it its connect deadline).
func dialTracked(ctx context.Context, addr string, seq *atomic.Uint64) (*trackedConn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("messaging: dialing %s: %w", addr, err)
	}
	return newTrackedConn(c, seq), nil
}

// sentKey marks a call's context with its *sendProbe.
type sentKey struct{}

// sendProbe is what one attempt learns about whether its request left this
// process.
type sendProbe struct {
	before uint64                      // the pool entry's write sequence before the call
	queued atomic.Int32                // streams grpc queued on a connection (stats.OutHeader)
	conn   atomic.Pointer[trackedConn] // the socket of the last one
}

// unsent reports whether the request provably never left this process:
// grpc never queued it on a connection, or queued it once on a socket that
// had stopped writing before the call began. Its bytes are written after
// the call began (they were queued after it), so they are numbered above
// before and were never written. A transparent retry by grpc (twice
// queued) is not analysed: unknown, conservatively.
func (p *sendProbe) unsent() bool {
	switch p.queued.Load() {
	case 0:
		return true
	case 1:
		c := p.conn.Load()
		return c != nil && c.unwrittenAfter(p.before)
	}
	return false
}

// peerClosedBeforeWrite reports whether the request was queued but its
// socket had stopped writing: the error then says so.
func (p *sendProbe) peerClosedBeforeWrite() bool {
	return p.queued.Load() > 0 && p.unsent()
}

// errNotWritten explains a not-sent call that grpc had queued.
var errNotWritten = errors.New("the runner had closed the connection before the request was written")
