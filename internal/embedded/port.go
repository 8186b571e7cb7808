package embedded

import (
	"fmt"
	"net"
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
