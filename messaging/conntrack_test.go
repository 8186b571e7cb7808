package messaging

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// TestTrackedConnStopsAtFirstFailedWrite: a failed write may have sent some
// bytes, so a request queued before it may have left; one queued after it
// did not, and no later write reaches the socket.
func TestTrackedConnStopsAtFirstFailedWrite(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	var seq atomic.Uint64
	tc := newTrackedConn(a, &seq)
	go io.Copy(io.Discard, b)
	if _, err := tc.Write([]byte("one")); err != nil {
		t.Fatal(err)
	}
	before := seq.Load() // a call queued now is written under 2 or later
	if tc.unwrittenAfter(before) {
		t.Fatal("a live connection reports its writes unwritten")
	}
	a.Close() // the next write fails
	if _, err := tc.Write([]byte("two")); err == nil {
		t.Fatal("write on a closed pipe succeeded")
	}
	if tc.unwrittenAfter(before) {
		t.Fatal("the failed write, which may have sent bytes, counts as unwritten")
	}
	after := seq.Load()
	if _, err := tc.Write([]byte("three")); !errors.Is(err, errPeerClosed) {
		t.Fatalf("write after the failure: %v, want errPeerClosed", err)
	}
	if !tc.unwrittenAfter(after) {
		t.Fatal("writes after the failure are not reported unwritten")
	}
	p := &sendProbe{before: before}
	p.queued.Store(1)
	p.conn.Store(tc)
	if p.unsent() {
		t.Fatal("a request queued before the failed write is reported unsent")
	}
	p = &sendProbe{before: after}
	p.queued.Store(1)
	p.conn.Store(tc)
	if !p.unsent() {
		t.Fatal("a request queued after the failed write is not reported unsent")
	}
	p.queued.Store(2) // grpc retried it transparently: not analysed
	if p.unsent() {
		t.Fatal("a request queued twice is reported unsent")
	}
}
