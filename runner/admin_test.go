package runner

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

// adminDo makes one request to an admin server with an optional bearer
// token and returns the status, a header and the body.
func adminDo(t *testing.T, hc *http.Client, method, url, token string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// rotate replaces a file's content and moves its modification time on, as
// a rotation a second later would: the reload checks the time and size.
func rotate(t *testing.T, path string, content []byte) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	later := fi.ModTime().Add(time.Second)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
}

// TestAdminNoAuthConfigured: a runner with neither token nor client CA
// refuses drain and pprof with 403 naming admin.token, and serves the
// read-only endpoints.
func TestAdminNoAuthConfigured(t *testing.T) {
	cfg, err := Load("", nil, []string{"etcd.endpoints=http://127.0.0.1:1", "s3.bucket=b", "log.level=error"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	for _, c := range []struct{ method, path string }{{"POST", "/admin/drain"}, {"GET", "/debug/pprof/heap"}, {"GET", "/debug/pprof/"}} {
		code, _, body := adminDo(t, srv.Client(), c.method, srv.URL+c.path, "anything")
		if code != http.StatusForbidden || !strings.Contains(body, "admin.token") {
			t.Errorf("%s %s without auth configured: %d %q, want 403 naming admin.token", c.method, c.path, code, body)
		}
	}
	for _, p := range []string{"/metrics", "/healthz", "/debug/status"} {
		if code, _, body := adminDo(t, srv.Client(), "GET", srv.URL+p, ""); code != http.StatusOK {
			t.Errorf("GET %s: %d %s, want 200", p, code, body)
		}
	}
}

// TestAdminBearerToken: with admin.token_file, drain and pprof answer 401
// (with a Bearer challenge) without a token or with a wrong one; pprof
// serves a profile with it; a rotated file takes effect at once (the old
// token refused, the new one drains: 202); the read-only endpoints need
// nothing.
func TestAdminBearerToken(t *testing.T) {
	c := newTestCluster(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	x := c.startWith("tok", []string{"admin.token_file=" + tokenFile})
	base := "http://" + x.r.AdminAddr()
	hc := &http.Client{Timeout: 10 * time.Second}

	for _, tok := range []string{"", "wrong-token", "first-token-but-longer"} {
		code, h, body := adminDo(t, hc, "POST", base+"/admin/drain", tok)
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("drain with token %q: %d %q (WWW-Authenticate %q), want 401 with a Bearer challenge", tok, code, body, h.Get("WWW-Authenticate"))
		}
		if code, _, _ := adminDo(t, hc, "GET", base+"/debug/pprof/heap", tok); code != http.StatusUnauthorized {
			t.Errorf("pprof with token %q: %d, want 401", tok, code)
		}
	}
	code, _, body := adminDo(t, hc, "GET", base+"/debug/pprof/heap", "first-token")
	if code != http.StatusOK || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Fatalf("pprof heap with the token: %d, %d bytes starting %q; want 200 and a gzipped profile", code, len(body), body[:min(len(body), 4)])
	}
	if code, _, body := adminDo(t, hc, "GET", base+"/debug/pprof/goroutine?debug=1", "first-token"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Errorf("pprof goroutine?debug=1: %d %.80q", code, body)
	}
	if code, _, body := adminDo(t, hc, "GET", base+"/debug/pprof/profile?seconds=1", "first-token"); code != http.StatusOK || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Errorf("CPU profile of 1s: %d, %d bytes", code, len(body))
	}
	if code, _, body := adminDo(t, hc, "GET", base+"/debug/pprof/profile?seconds=301", "first-token"); code != http.StatusBadRequest {
		t.Errorf("CPU profile of 301s: %d %q, want 400", code, body)
	}
	for _, p := range []string{"/metrics", "/healthz", "/debug/status"} {
		if code, _, _ := adminDo(t, hc, "GET", base+p, ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200", p, code)
		}
	}

	rotate(t, tokenFile, []byte("second-token\n"))
	if code, _, _ := adminDo(t, hc, "POST", base+"/admin/drain", "first-token"); code != http.StatusUnauthorized {
		t.Fatalf("drain with the rotated-out token: %d, want 401", code)
	}
	if x.status(t).Draining {
		t.Fatal("a refused drain started draining")
	}
	if code, _, body := adminDo(t, hc, "POST", base+"/admin/drain", "second-token"); code != http.StatusAccepted {
		t.Fatalf("drain with the rotated-in token: %d %s, want 202", code, body)
	}
	testenv.WaitFor(t, "the runner draining", 10*time.Second, func() bool { return x.status(t).Draining })
}

// TestAdminMutualTLS: with admin.cert_file and admin.client_ca_file the
// admin server serves HTTPS and registers an https:// address; a client
// certificate the CA signed drains without a token, a client without a
// certificate reads /metrics but is refused the drain (401).
func TestAdminMutualTLS(t *testing.T) {
	c := newTestCluster(t)
	p := testenv.NewPKI(t)
	x := c.startWith("mtls", []string{"admin.cert_file=" + p.ServerCert, "admin.key_file=" + p.ServerKey, "admin.client_ca_file=" + p.CA})
	testenv.WaitFor(t, "registered", 10*time.Second, func() bool { return x.r.Status().Registered })
	addr := x.r.Status().Addr
	if want := "https://" + x.r.AdminAddr(); addr != want {
		t.Fatalf("registered admin address %q, want %q", addr, want)
	}
	client := func(keys ...string) *http.Client { return adminTLSClient(t, p, keys...) }
	anon := client()
	if code, _, body := adminDo(t, anon, "GET", addr+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, "tenure_") {
		t.Fatalf("GET /metrics over HTTPS without a client certificate: %d", code)
	}
	if code, _, _ := adminDo(t, anon, "POST", addr+"/admin/drain", ""); code != http.StatusUnauthorized {
		t.Fatalf("drain without a client certificate: %d, want 401", code)
	}
	if code, _, _ := adminDo(t, &http.Client{Timeout: 5 * time.Second}, "GET", "http://"+x.r.AdminAddr()+"/healthz", ""); code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the HTTPS admin server: %d, want 400 (Go's answer to HTTP on a TLS port)", code)
	}
	if x.r.Status().Draining {
		t.Fatal("draining before an authorised drain")
	}
	authed := client("admin.client_cert_file="+p.ClientCert, "admin.client_key_file="+p.ClientKey)
	if code, _, body := adminDo(t, authed, "POST", addr+"/admin/drain", ""); code != http.StatusAccepted {
		t.Fatalf("drain with a verified client certificate: %d %s, want 202", code, body)
	}
	testenv.WaitFor(t, "the runner draining", 10*time.Second, func() bool { return x.r.Status().Draining })
}

// TestAdminServerCertReload: the admin server's certificate is reloaded
// when its files change: a new connection sees the new certificate.
func TestAdminServerCertReload(t *testing.T) {
	p := testenv.NewPKI(t)
	cert, key := copyPair(t, p.ServerCert, p.ServerKey)
	cfg, err := Load("", nil, []string{"etcd.endpoints=http://127.0.0.1:1", "s3.bucket=b", "admin.cert_file=" + cert, "admin.key_file=" + key})
	if err != nil {
		t.Fatal(err)
	}
	stls, err := cfg.Admin.serverTLS(nil)
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", stls)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	checkRotation(t, served, "2", func() { rotate(t, cert, readFile(t, p.PeerCert)); rotate(t, key, readFile(t, p.PeerKey)) }, "4")
}

// checkRotation checks that serial reports before, then after once rotate
// has run.
func checkRotation(t *testing.T, serial func() string, before string, rotate func(), after string) {
	t.Helper()
	if s := serial(); s != before {
		t.Fatalf("certificate serial %s, want %s", s, before)
	}
	rotate()
	if s := serial(); s != after {
		t.Fatalf("after rotation: certificate serial %s, want the new certificate's %s", s, after)
	}
}

// copyPair copies a certificate and key into files of their own, for a
// test to rotate.
func copyPair(t *testing.T, certFrom, keyFrom string) (cert, key string) {
	t.Helper()
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	copyFile(t, certFrom, cert)
	copyFile(t, keyFrom, key)
	return cert, key
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if err := os.WriteFile(to, readFile(t, from), 0o600); err != nil {
		t.Fatal(err)
	}
}

// adminTLSClient is an HTTP client trusting p's CA as the admin client
// config of a runner config with keys set (a client certificate, say).
func adminTLSClient(t *testing.T, p testenv.PKI, keys ...string) *http.Client {
	t.Helper()
	cfg, err := Load("", nil, append([]string{"etcd.endpoints=http://127.0.0.1:1", "s3.bucket=b", "admin.ca_file=" + p.CA}, keys...))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := AdminTLSClientConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
}
