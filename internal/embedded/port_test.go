package embedded

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeStableAddrBelowEphemeralRange: the port is outside the kernel's
// ephemeral range, so no outgoing connection can hold it while the server
// that owns it restarts, and it can be bound.
func TestFreeStableAddrBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		addr, err := FreeStableAddr()
		if err != nil {
			t.Fatal(err)
		}
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		if port >= low {
			t.Fatalf("port %d is in the ephemeral range (from %d)", port, low)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("binding %s: %v", addr, err)
		}
		l.Close()
	}
}
