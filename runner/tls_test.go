package runner

import (
	"bytes"
	"context"
	"crypto/tls"
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

// clientSerials is a TLS server that requires a client certificate signed
// by the PKI's CA and records the serial of each one presented.
type clientSerials struct {
	ln      net.Listener
	serials chan string
}

func newClientSerials(t *testing.T, p testenv.PKI) *clientSerials {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := caPool("test CA", p.CA)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	s := &clientSerials{ln: ln, serials: make(chan string, 100)}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if tc.Handshake() == nil {
				select {
				case s.serials <- tc.ConnectionState().PeerCertificates[0].SerialNumber.String():
				default: // a client retrying beyond what the test reads
				}
			}
			c.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return s
}

// next returns the serial of the next client certificate presented.
func (s *clientSerials) next(t *testing.T) string {
	t.Helper()
	select {
	case v := <-s.serials:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no client certificate presented within 10s")
		return ""
	}
}

// TestEtcdClientCertReload: the TLS config of an etcd connection presents
// the certificate its files hold at each new connection. The etcd client
// keeps one tls.Config for its life, so a rotated certificate (the pair
// replaced by another the same CA signed) is presented on the next
// connection without a restart; files that do not load (a half-written
// rotation) leave the last good pair in use. DialEtcd goes through the
// same path: the etcd client presents the certificate the files hold.
func TestEtcdClientCertReload(t *testing.T) {
	p := testenv.NewPKI(t)
	srv := newClientSerials(t, p)
	cert, key := copyPair(t, p.ClientCert, p.ClientKey)
	ec := EtcdConfig{Endpoints: []string{"https://" + srv.ln.Addr().String()}, CAFile: p.CA, CertFile: cert, KeyFile: key}
	tc, err := EtcdTLS(ec)
	if err != nil {
		t.Fatal(err)
	}
	handshake := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", srv.ln.Addr().String(), tc)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// TLS 1.3 sends the client certificate after the client's
		// handshake ends: the server's record of it is the proof.
		return srv.next(t)
	}
	checkRotation(t, handshake, "3", func() { rotate(t, cert, readFile(t, p.PeerCert)); rotate(t, key, readFile(t, p.PeerKey)) }, "4")
	rotate(t, cert, []byte("not a certificate"))
	if s := handshake(); s != "4" {
		t.Fatalf("after a broken rotation: client certificate serial %s, want the last good one's 4", s)
	}

	cfg := DefaultConfig()
	cfg.Etcd = ec
	cfg.Etcd.CertFile, cfg.Etcd.KeyFile, cfg.Etcd.DialTimeout = p.ClientCert, p.ClientKey, Duration(500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, err := DialEtcd(ctx, cfg); err == nil {
		s.Close()
	}
	if s := srv.next(t); s != "3" {
		t.Fatalf("DialEtcd presented serial %s, want 3", s)
	}
}
