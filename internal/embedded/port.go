package embedded

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreeAddr returns a loopback address with a port that was free a moment
// ago. Another process may take it before the caller binds it; callers that
// bind it retry on "address in use".
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("embedded: find a free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("embedded: find a free port: %w", err)
	}
	return addr, nil
}

// FreeStableAddr returns, like FreeAddr, a loopback address with a port
// that was free a moment ago, but one below the kernel's ephemeral port
// range: for a server that must bind the same port again after a restart
// (an etcd member of a cluster keeps its addresses). A port from the
// ephemeral range can be taken, while its server is down, as the source
// port of any outgoing connection, for as long as that connection lives.
func FreeStableAddr() (string, error) {
	low := ephemeralLow()
	const from = 10000
	if low <= from+1000 {
		return FreeAddr() // no room below the range: the best we can do
	}
	for range 100 {
		addr := "127.0.0.1:" + strconv.Itoa(from+rand.N(low-from))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken: try another
		}
		if err := l.Close(); err != nil {
			return "", fmt.Errorf("embedded: find a free port: %w", err)
		}
		return addr, nil
	}
	return "", fmt.Errorf("embedded: no free port found in [%d, %d)", from, low)
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read, as on other systems).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 0 {
				return n
			}
		}
	}
	return 32768
}
