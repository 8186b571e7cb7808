package runner

import (
	"errors"
	"fmt"
	"net"
	"os"
)

// A runner registers the addresses others reach it at: its admin address
// (tenure status, tenure drain) and its call address (other runners,
// clients). An unspecified address (0.0.0.0, [::], ":port") is fine to
// listen on but reaches nobody when advertised, so it is never registered:
// when the listen address is unspecified and no advertise address is set,
// the host is derived from POD_IP (what a Kubernetes pod gets from
// status.podIP), else from the host's first non-loopback unicast address;
// failing both, New refuses to start.

// PodIPEnv is the environment variable an unspecified listen address takes
// the host to advertise from.
const PodIPEnv = "POD_IP"

// errNoAdvertiseHost reports that neither POD_IP nor the interfaces gave
// an address to advertise.
var errNoAdvertiseHost = errors.New("no address to advertise")

// hostLookup is where the host to advertise comes from; tests inject it.
type hostLookup struct {
	getenv func(string) string
	addrs  func() ([]net.Addr, error)
}

// systemLookup reads the process environment and the host's interfaces.
func systemLookup() hostLookup { return hostLookup{getenv: os.Getenv, addrs: net.InterfaceAddrs} }

// unspecifiedHost reports whether host ("" included) listens on every
// interface.
func unspecifiedHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}

// host returns the address to advertise in place of an unspecified one:
// POD_IP when set, else the first global unicast address of the host's
// interfaces (IPv4 first).
func (h hostLookup) host() (string, error) {
	if v := h.getenv(PodIPEnv); v != "" {
		ip := net.ParseIP(v)
		if ip == nil || ip.IsUnspecified() {
			return "", fmt.Errorf("%s = %q is no IP address to advertise", PodIPEnv, v)
		}
		return ip.String(), nil
	}
	addrs, err := h.addrs()
	if err != nil {
		return "", fmt.Errorf("%w: %s unset, and the interfaces: %w", errNoAdvertiseHost, PodIPEnv, err)
	}
	var v6 net.IP
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || !n.IP.IsGlobalUnicast() {
			continue
		}
		if n.IP.To4() != nil {
			return n.IP.String(), nil
		}
		if v6 == nil {
			v6 = n.IP
		}
	}
	if v6 != nil {
		return v6.String(), nil
	}
	return "", fmt.Errorf("%w: %s unset and no non-loopback unicast address on this host", errNoAdvertiseHost, PodIPEnv)
}

// advertiseFor returns what to advertise for a server listening on listen
// when its advertise key (advKey) is empty: listen itself when its host is
// specified, else the derived host with listen's port. "" when nothing
// listens.
func (h hostLookup) advertiseFor(advKey, listenKey, listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || !unspecifiedHost(host) {
		return listen, nil // Validate reports a malformed listen address
	}
	derived, err := h.host()
	if err != nil {
		return "", fmt.Errorf("%w: %s is empty and %s = %s listens on every interface, which reaches nobody when advertised: %w; set %s (or %s) to this runner's reachable address",
			ErrInvalidConfig, advKey, listenKey, listen, err, advKey, PodIPEnv)
	}
	return net.JoinHostPort(derived, port), nil
}

// resolveAdvertise fills advertise_addr and call.advertise_addr where the
// listen address is unspecified and they are empty.
func (c *Config) resolveAdvertise(h hostLookup) error {
	var errs []error
	if c.AdvertiseAddr == "" && c.AdminAddr != "" {
		a, err := h.advertiseFor("advertise_addr", "admin_addr", c.AdminAddr)
		c.AdvertiseAddr, errs = a, append(errs, err)
	}
	if c.Call.AdvertiseAddr == "" && c.Call.Addr != "" {
		if host, _, err := net.SplitHostPort(c.Call.Addr); err == nil && unspecifiedHost(host) {
			a, err := h.advertiseFor("call.advertise_addr", "call.addr", c.Call.Addr)
			c.Call.AdvertiseAddr, errs = a, append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkAdvertise refuses a set advertise address that is malformed or
// unspecified.
func checkAdvertise(key, addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s = %s: must be host:port: %w", ErrInvalidConfig, key, addr, err)
	case unspecifiedHost(host):
		return fmt.Errorf("%w: %s = %s: an unspecified address reaches nobody; give this runner's reachable address, or leave it empty to derive it from %s or the host's address",
			ErrInvalidConfig, key, addr, PodIPEnv)
	}
	return nil
}

// withBoundPort replaces a port 0 in addr by the port the listener got.
func withBoundPort(addr string, ln net.Addr) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "0" || ln == nil {
		return addr
	}
	if _, real, err := net.SplitHostPort(ln.String()); err == nil {
		return net.JoinHostPort(host, real)
	}
	return addr
}
