package netproxy_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/netproxy"
	"github.com/tenurehq/tenure/internal/testenv"
)

// echoServer echoes every connection back until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

func newProxy(t *testing.T) *netproxy.Proxy {
	t.Helper()
	testenv.CheckLeaks(t)
	p, err := netproxy.New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func dial(t *testing.T, p *netproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back within d.
func roundTrip(c net.Conn, msg string, d time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

func TestPassForwardsBothWays(t *testing.T) {
	p := newProxy(t)
	if p.Mode() != netproxy.Pass {
		t.Fatalf("initial mode %v, want pass", p.Mode())
	}
	c := dial(t, p)
	for _, msg := range []string{"ping", "a longer message"} {
		got, err := roundTrip(c, msg, 5*time.Second)
		if err != nil || got != msg {
			t.Fatalf("round trip %q: got %q, %v", msg, got, err)
		}
	}
}

// TestBlackholeHoldsDataUntilHealed: while blackholed nothing reaches the
// other side (a read times out), and what was sent is delivered once the
// proxy passes traffic again.
func TestBlackholeHoldsDataUntilHealed(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	if _, err := roundTrip(c, "warm", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetMode(netproxy.Blackhole)
	_, err := roundTrip(c, "held", 200*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a blackhole: %v, want a deadline error", err)
	}
	// A new connection is accepted but stalls as well.
	c2 := dial(t, p)
	if _, err := roundTrip(c2, "new", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection through a blackhole: %v, want a deadline error", err)
	}
	p.SetMode(netproxy.Pass)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after healing: got %q, %v; want the held data", buf, err)
	}
}

// TestResetClosesAndRefuses: Reset ends open connections and closes new
// ones at once; Pass makes the proxy usable again.
func TestResetClosesAndRefuses(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	if _, err := roundTrip(c, "warm", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetMode(netproxy.Reset)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after reset: %v, want the connection closed", err)
	}
	c2 := dial(t, p)
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a connection accepted in reset mode: %v, want it closed", err)
	}
	p.SetMode(netproxy.Pass)
	if got, err := roundTrip(dial(t, p), "back", 5*time.Second); err != nil || got != "back" {
		t.Fatalf("after reset then pass: got %q, %v", got, err)
	}
}

// TestDelaySlowsEveryChunk: a round trip crosses the proxy twice, so it
// takes at least twice the delay.
func TestDelaySlowsEveryChunk(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	const d = 50 * time.Millisecond
	p.SetDelay(d)
	start := time.Now()
	if got, err := roundTrip(c, "slow", 5*time.Second); err != nil || got != "slow" {
		t.Fatalf("round trip: got %q, %v", got, err)
	}
	if took := time.Since(start); took < 2*d {
		t.Fatalf("round trip with a %s delay took %s, want ≥ %s", d, took, 2*d)
	}
}

// TestCloseEndsEverything: Close ends open connections, stops listening
// and is idempotent.
func TestCloseEndsEverything(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	p.SetMode(netproxy.Blackhole) // a pipe blocked on a blackhole must end too
	c.Write([]byte("x"))
	p.Close()
	p.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Close: %v, want the connection closed", err)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("the proxy still accepts connections after Close")
	}
}

func TestNewRejectsBadTarget(t *testing.T) {
	for _, target := range []string{"", "no-port", "127.0.0.1"} {
		if _, err := netproxy.New(target); !errors.Is(err, netproxy.ErrInvalidTarget) {
			t.Errorf("New(%q): %v, want ErrInvalidTarget", target, err)
		}
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[netproxy.Mode]string{netproxy.Pass: "pass", netproxy.Blackhole: "blackhole", netproxy.Reset: "reset", 7: "Mode(7)"} {
		if got := m.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(m), got, want)
		}
	}
}
