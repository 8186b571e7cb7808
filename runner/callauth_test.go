package runner

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/messaging"
)

// postEntity posts body to an HTTP entity call path with an optional
// bearer token and returns the status, the headers and the body.
func postEntity(t *testing.T, hc *http.Client, url, token, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// refusal decodes a refusal's error body.
func refusal(t *testing.T, b []byte) messaging.ErrorBody {
	t.Helper()
	var e messaging.ErrorBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("refusal %q is no error body: %v", b, err)
	}
	return e
}

// TestCallHTTPCredential: on a runner with call.http.token, an HTTP entity
// call without it, with the admin token or with a wrong one gets 401 with
// a Bearer challenge and the handler never runs (its counter stays 0);
// with it the call is answered. The authorizer, consulted after the
// credential, refuses with 403 per entity and per operation (the
// operation route is covered too), and the handler still has not run.
func TestCallHTTPCredential(t *testing.T) {
	c := newTestCluster(t)
	var ran atomic.Int64
	type seen struct{ typ, id, op string }
	var last atomic.Pointer[seen]
	authorize := WithCallAuthorizer(func(r *http.Request, typ, id, op string) error {
		last.Store(&seen{typ, id, op})
		switch {
		case id == "forbidden":
			return errors.New("entity forbidden is not for this caller")
		case op == "secret":
			return errors.New("operation secret is not for this caller")
		}
		return nil
	})
	x := c.startWith("auth", []string{"admin.token=admin-secret", "call.http.token=data-secret"}, withWho("auth", &ran), authorize)
	testenv.WaitFor(t, "registered", 10*time.Second, func() bool { return x.r.Status().Registered })
	base := "http://" + x.r.AdminAddr() + "/v1/entities/"
	hc := &http.Client{Timeout: 20 * time.Second}

	for _, tok := range []string{"", "admin-secret", "data-secret-but-longer", "wrong"} {
		for _, path := range []string{typeWho + "/w1", typeWho + "/w1/secret", typeWho + "/forbidden"} {
			code, h, b := postEntity(t, hc, base+path+"?timeout=10s", tok, `{"n":1}`)
			if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("POST %s with token %q: %d %s (WWW-Authenticate %q), want 401 with a Bearer challenge", path, tok, code, b, h.Get("WWW-Authenticate"))
			}
			if e := refusal(t, b); e.Code != "unauthorized" || e.Applied != "no" || !strings.Contains(e.Error, "call.http.token") {
				t.Errorf("POST %s with token %q: body %+v, want unauthorized, not applied, naming call.http.token", path, tok, e)
			}
		}
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for calls without the credential", n)
	}
	if last.Load() != nil {
		t.Fatal("the authorizer was consulted for a call without the credential")
	}

	code, _, b := postEntity(t, hc, base+typeWho+"/w1?timeout=10s", "data-secret", `{"n":1}`)
	var who whoReply
	if code != http.StatusOK || json.Unmarshal(b, &who) != nil || who.ID != "w1" || !bytes.Equal(who.Input, []byte(`{"n":1}`)) {
		t.Fatalf("call with the data-plane token: %d %s, want 200 and the who reply", code, b)
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("the handler ran %d times after one authorised call, want 1", n)
	}
	if s := last.Load(); s == nil || *s != (seen{typeWho, "w1", ""}) {
		t.Fatalf("the authorizer saw %+v, want the type, the id and no operation", s)
	}

	for _, c := range []struct{ path, want string }{{typeWho + "/forbidden", "entity forbidden"}, {typeWho + "/w2/secret", "operation secret"}} {
		path, want := c.path, c.want
		code, _, b := postEntity(t, hc, base+path+"?timeout=10s", "data-secret", `{}`)
		if e := refusal(t, b); code != http.StatusForbidden || e.Code != "forbidden" || e.Applied != "no" || !strings.Contains(e.Error, want) {
			t.Errorf("POST %s refused by the authorizer: %d %+v, want 403 with its message %q", path, code, e, want)
		}
	}
	if s := last.Load(); s == nil || *s != (seen{typeWho, "w2", "secret"}) {
		t.Errorf("the authorizer saw %+v for the operation route, want its operation", s)
	}
	// A path naming no entity never reaches the handler when an authorizer
	// decides: it could not be asked.
	if code, _, _ := postEntity(t, hc, base+typeWho, "data-secret", `{}`); code != http.StatusNotFound {
		t.Errorf("POST /v1/entities/%s: %d, want 404", typeWho, code)
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want only the one authorised call", n)
	}
}

// newIdleRunner returns a runner that is not running, with the overrides:
// its Handler answers the entity calls that pass the credential check with
// 503 "not running", so the check is seen without a cluster.
func newIdleRunner(t *testing.T, overrides ...string) *Runner {
	t.Helper()
	cfg, err := Load("", nil, append([]string{"etcd.endpoints=http://127.0.0.1:1", "s3.bucket=b", "log.level=error"}, overrides...))
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCallHTTPNotConfigured: a runner with no data-plane credential and
// not open refuses every entity call with 401 saying how to configure it;
// call.http.open lets calls through without one; a rotated
// call.http.token_file takes effect without a restart.
func TestCallHTTPNotConfigured(t *testing.T) {
	closed := httptest.NewServer(newIdleRunner(t, "admin.token=admin-secret").Handler())
	defer closed.Close()
	for _, tok := range []string{"", "admin-secret"} {
		code, h, b := postEntity(t, closed.Client(), closed.URL+"/v1/entities/echo/e1", tok, `{}`)
		e := refusal(t, b)
		if code != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" {
			t.Errorf("call with token %q and no credential configured: %d, want 401 with a challenge", tok, code)
		}
		for _, want := range []string{"no credential configured", "call.http.token", "call.http.open"} {
			if !strings.Contains(e.Error, want) {
				t.Errorf("refusal %q does not say %q", e.Error, want)
			}
		}
	}

	open := httptest.NewServer(newIdleRunner(t, "call.http.open=true").Handler())
	defer open.Close()
	if code, _, b := postEntity(t, open.Client(), open.URL+"/v1/entities/echo/e1", "", `{}`); code != http.StatusServiceUnavailable || !strings.Contains(string(b), "not running") {
		t.Errorf("call to an open endpoint: %d %s, want it through to the (idle) handler: 503 not running", code, b)
	}

	file := filepath.Join(t.TempDir(), "call-token")
	if err := os.WriteFile(file, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newIdleRunner(t, "call.http.token_file="+file).Handler())
	defer srv.Close()
	if code, _, _ := postEntity(t, srv.Client(), srv.URL+"/v1/entities/echo/e1", "first", `{}`); code != http.StatusServiceUnavailable {
		t.Fatalf("call with the file's token: %d, want it through (503 not running)", code)
	}
	rotate(t, file, []byte("second\n"))
	if code, _, _ := postEntity(t, srv.Client(), srv.URL+"/v1/entities/echo/e1", "first", `{}`); code != http.StatusUnauthorized {
		t.Errorf("call with the rotated-out token: %d, want 401", code)
	}
	if code, _, _ := postEntity(t, srv.Client(), srv.URL+"/v1/entities/echo/e1", "second", `{}`); code != http.StatusServiceUnavailable {
		t.Errorf("call with the rotated-in token: %d, want it through", code)
	}
}

// TestCallHTTPClientCertificate: when the admin server verifies client
// certificates, a verified one authorises entity calls without a token; a
// client without one is refused (401) and told so.
func TestCallHTTPClientCertificate(t *testing.T) {
	p := testenv.NewPKI(t)
	r := newIdleRunner(t, "admin.cert_file="+p.ServerCert, "admin.key_file="+p.ServerKey, "admin.client_ca_file="+p.CA)
	stls, err := r.cfg.Admin.serverTLS(r.log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(tls.NewListener(ln, stls))
	defer srv.Close()
	client := func(keys ...string) *http.Client { return adminTLSClient(t, p, keys...) }
	url := "https://" + ln.Addr().String() + "/v1/entities/echo/e1"
	code, _, b := postEntity(t, client(), url, "", `{}`)
	if e := refusal(t, b); code != http.StatusUnauthorized || !strings.Contains(e.Error, "client certificate") {
		t.Errorf("call without a client certificate: %d %+v, want 401 asking for one", code, e)
	}
	if code, _, b := postEntity(t, client("admin.client_cert_file="+p.ClientCert, "admin.client_key_file="+p.ClientKey), url, "", `{}`); code != http.StatusServiceUnavailable {
		t.Errorf("call with a verified client certificate: %d %s, want it through (503 not running)", code, b)
	}
}

// TestCallHTTPConfig: the data-plane keys load from YAML and the
// environment, and the invalid combinations are refused naming the key.
func TestCallHTTPConfig(t *testing.T) {
	cfg, err := Load(writeFile(t, minimal+"call:\n  http:\n    token_file: /run/secrets/calls\n"), []string{"TENURE_CALL_HTTP_TOKEN=from-env"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.Call.HTTP; h.Token != "from-env" || h.TokenFile != "/run/secrets/calls" || h.Open {
		t.Fatalf("call.http loaded as %+v", h)
	}
	if tok, err := cfg.Call.HTTP.BearerToken(); err != nil || tok != "from-env" {
		t.Fatalf("BearerToken: %q, %v; want the token before the file", tok, err)
	}
	if cfg, err := Load(writeFile(t, minimal+"call:\n  http:\n    open: true\n"), nil, nil); err != nil || !cfg.Call.HTTP.Open {
		t.Fatalf("call.http.open: %+v, %v", cfg.Call.HTTP, err)
	}
	for _, c := range []struct {
		overrides []string
		key       string
	}{
		{[]string{"call.http.open=true", "call.http.token=t"}, "call.http.open"},
		{[]string{"call.http.open=true", "call.http.token_file=/f"}, "call.http.open"},
		{[]string{"admin.token=same", "call.http.token=same"}, "call.http.token"},
		{[]string{"admin.token_file=/same", "call.http.token_file=/same"}, "call.http.token_file"},
	} {
		_, err := Load(writeFile(t, minimal), nil, c.overrides)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.key+" = ") {
			t.Errorf("%v: %v; want an invalid config naming %s", c.overrides, err, c.key)
		}
		if err != nil && strings.Contains(err.Error(), "same") && strings.Contains(c.overrides[1], "token=") {
			t.Errorf("%v: the error %q shows the token", c.overrides, err)
		}
	}
}
