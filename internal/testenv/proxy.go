package testenv

import (
	"testing"

	"github.com/tenurehq/tenure/internal/netproxy"
)

// ProxyMode is how a Proxy treats traffic (see netproxy.Mode).
type ProxyMode = netproxy.Mode

// Proxy modes, as in package netproxy.
const (
	// Pass forwards traffic both ways.
	Pass = netproxy.Pass
	// Blackhole keeps connections open but forwards nothing until the mode
	// changes, like a network partition.
	Blackhole = netproxy.Blackhole
	// Reset closes every connection and refuses new ones, like a dead host.
	Reset = netproxy.Reset
)

// Proxy is a loopback TCP proxy in front of one target, for partitioning a
// client from a server in tests: a netproxy.Proxy.
type Proxy = netproxy.Proxy

// NewProxy starts a proxy to target (host:port) and closes it at cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := netproxy.New(target)
	if err != nil {
		t.Fatalf("testenv: proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}
