package runner

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

// wireRecorder is a TCP listener that records the first bytes of every
// connection made to it and answers nothing: what a client sends first
// tells TLS (a handshake record, 0x16) from plain text (HTTP/2's preface).
type wireRecorder struct {
	ln    net.Listener
	mu    sync.Mutex
	first [][]byte
	wg    sync.WaitGroup
}

func newWireRecorder(t *testing.T) *wireRecorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &wireRecorder{ln: ln}
	w.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			w.wg.Go(func() {
				defer c.Close()
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 8)
				n, _ := c.Read(buf)
				w.mu.Lock()
				w.first = append(w.first, buf[:n])
				w.mu.Unlock()
			})
		}
	})
	t.Cleanup(func() { ln.Close(); w.wg.Wait() })
	return w
}

func (w *wireRecorder) addr() string { return w.ln.Addr().String() }

// take returns the first bytes recorded so far and forgets them.
func (w *wireRecorder) take() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.first
	w.first = nil
	return out
}

// writeCA writes a self-signed CA certificate and returns its file.
func writeCA(t *testing.T) string { return testenv.NewPKI(t).CA }

// TestDialEtcdSchemesOnTheWire watches what DialEtcd sends: nothing at all
// for a CA file with an http:// endpoint (refused, naming both), a TLS
// handshake for https:// without a CA file (the system roots) and for a
// CA file with a scheme-less endpoint, plain text for http:// without TLS
// settings.
func TestDialEtcdSchemesOnTheWire(t *testing.T) {
	ca := writeCA(t)
	dial := func(endpoint, caFile string) error {
		cfg := DefaultConfig()
		cfg.Etcd.Endpoints, cfg.Etcd.CAFile, cfg.Etcd.DialTimeout = []string{endpoint}, caFile, Duration(500*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := DialEtcd(ctx, cfg)
		if err == nil {
			s.Close()
		}
		return err
	}
	// firstBytes dials a listener of its own and returns the first bytes
	// of the first connection made to it.
	firstBytes := func(scheme, caFile string) []byte {
		t.Helper()
		w := newWireRecorder(t)
		if err := dial(scheme+w.addr(), caFile); err == nil {
			t.Fatalf("%s%s: dialled a listener that answers nothing", scheme, w.addr())
		}
		var got [][]byte
		testenv.WaitFor(t, "a connection reaches the listener", 5*time.Second, func() bool {
			got = append(got, w.take()...)
			return len(got) > 0
		})
		return got[0]
	}

	w := newWireRecorder(t)
	plain := "http://" + w.addr()
	err := dial(plain, ca)
	if err == nil || !strings.Contains(err.Error(), "etcd.ca_file = "+ca) || !strings.Contains(err.Error(), plain) {
		t.Fatalf("ca_file with %s: err = %v, want a refusal naming etcd.ca_file and the endpoint", plain, err)
	}
	if got := w.take(); len(got) > 0 {
		t.Fatalf("ca_file with %s: %d connection(s) made, first bytes %q", plain, len(got), got[0])
	}

	if b := firstBytes("https://", ""); len(b) == 0 || b[0] != 0x16 {
		t.Errorf("https:// without ca_file: first bytes %q, want a TLS handshake record (0x16)", b)
	}
	if b := firstBytes("", ca); len(b) == 0 || b[0] != 0x16 {
		t.Errorf("host:port with ca_file: first bytes %q, want a TLS handshake record (0x16)", b)
	}
	if b := firstBytes("http://", ""); !bytes.HasPrefix(b, []byte("PRI * HT")) {
		t.Errorf("http:// without TLS settings: first bytes %q, want HTTP/2's plain-text preface", b)
	}
}
