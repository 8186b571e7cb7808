package runner

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// fakeHost is a hostLookup with a made-up environment and interfaces.
func fakeHost(env map[string]string, cidrs ...string) hostLookup {
	return hostLookup{
		getenv: func(k string) string { return env[k] },
		addrs: func() ([]net.Addr, error) {
			var out []net.Addr
			for _, c := range cidrs {
				ip, n, err := net.ParseCIDR(c)
				if err != nil {
					return nil, err
				}
				n.IP = ip
				out = append(out, n)
			}
			return out, nil
		},
	}
}

// TestAdvertiseDerivation: an unspecified listen address advertises
// POD_IP, else the host's first non-loopback unicast address (IPv4
// first), else New refuses naming the key and POD_IP; an explicit
// unspecified advertise address is refused by Validate.
func TestAdvertiseDerivation(t *testing.T) {
	pod := map[string]string{PodIPEnv: "10.1.2.3"}
	ifaces := []string{"127.0.0.1/8", "::1/128", "fe80::1/64", "2001:db8::7/64", "192.168.1.7/24"}
	for _, tc := range []struct {
		name        string
		set         []string
		host        hostLookup
		admin, call string // the advertised addresses New settles on
		err, errKey string // a part of New's error, and the key it names
	}{
		{name: "specified admin_addr is advertised as is", set: []string{"admin_addr=127.0.0.1:9310"},
			host: fakeHost(nil), admin: "127.0.0.1:9310"},
		{name: "0.0.0.0 takes POD_IP", set: []string{"admin_addr=0.0.0.0:9310"},
			host: fakeHost(pod, ifaces...), admin: "10.1.2.3:9310"},
		{name: ":port takes the first IPv4 interface address", set: []string{"admin_addr=:9310"},
			host: fakeHost(nil, ifaces...), admin: "192.168.1.7:9310"},
		{name: "[::] takes an IPv6 POD_IP, bracketed", set: []string{"admin_addr=[::]:9310"},
			host: fakeHost(map[string]string{PodIPEnv: "fd00::5"}), admin: "[fd00::5]:9310"},
		{name: "IPv6 global unicast when no IPv4", set: []string{"admin_addr=0.0.0.0:9310"},
			host: fakeHost(nil, "127.0.0.1/8", "fe80::1/64", "2001:db8::7/64"), admin: "[2001:db8::7]:9310"},
		{name: "explicit advertise_addr wins", set: []string{"admin_addr=0.0.0.0:9310", "advertise_addr=runner-1.internal:9310"},
			host: fakeHost(pod), admin: "runner-1.internal:9310"},
		{name: "nothing to derive from", set: []string{"admin_addr=0.0.0.0:9310"},
			host: fakeHost(nil, "127.0.0.1/8", "fe80::1/64"), err: "POD_IP", errKey: "advertise_addr is empty"},
		{name: "POD_IP not an address", set: []string{"admin_addr=0.0.0.0:9310"},
			host: fakeHost(map[string]string{PodIPEnv: "pod-ip"}, ifaces...), err: `POD_IP = "pod-ip"`, errKey: "advertise_addr"},
		{name: "explicit 0.0.0.0 refused", set: []string{"advertise_addr=0.0.0.0:9310"},
			host: fakeHost(pod), err: "unspecified address", errKey: "advertise_addr = 0.0.0.0:9310"},
		{name: "call.addr on every interface takes POD_IP", set: []string{"call.addr=0.0.0.0:9320"},
			host: fakeHost(pod), admin: "127.0.0.1:9310", call: "10.1.2.3:9320"},
		{name: "call.addr with port 0 keeps it for the listener's", set: []string{"call.addr=[::]:0"},
			host: fakeHost(nil, ifaces...), admin: "127.0.0.1:9310", call: "192.168.1.7:0"},
		{name: "call.addr on every interface and nothing to derive from", set: []string{"call.addr=0.0.0.0:9320"},
			host: fakeHost(nil), err: "POD_IP", errKey: "call.advertise_addr is empty"},
		{name: "explicit call.advertise_addr [::] refused", set: []string{"call.advertise_addr=[::]:9320"},
			host: fakeHost(pod), err: "unspecified address", errKey: "call.advertise_addr = [::]:9320"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := append([]string{"etcd.endpoints=http://127.0.0.1:1", "s3.bucket=b"}, tc.set...)
			cfg, err := Load("", nil, set)
			var r *Runner
			if err == nil {
				r, err = New(cfg, func(r *Runner) { r.lookup = tc.host })
			}
			if tc.err != "" {
				if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.errKey) {
					t.Fatalf("err = %v, want one naming %q and %q", err, tc.errKey, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Config().AdvertiseAddr; got != tc.admin {
				t.Errorf("advertise_addr = %q, want %q", got, tc.admin)
			}
			if got := r.Config().Call.AdvertiseAddr; got != tc.call {
				t.Errorf("call.advertise_addr = %q, want %q", got, tc.call)
			}
		})
	}
}

// TestWithBoundPort: a port 0 is replaced by the listener's, any other
// address kept.
func TestWithBoundPort(t *testing.T) {
	ln := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 41234}
	for in, want := range map[string]string{
		"10.1.2.3:0":    "10.1.2.3:41234",
		"[fd00::5]:0":   "[fd00::5]:41234",
		"10.1.2.3:9320": "10.1.2.3:9320",
		"":              "",
	} {
		if got := withBoundPort(in, ln); got != want {
			t.Errorf("withBoundPort(%q) = %q, want %q", in, got, want)
		}
	}
}
