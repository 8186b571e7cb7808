package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

// TestDrainNeedsAdminCredentials: `tenure drain` against real runners is
// refused without the runners' token (401), with a wrong one (401) and by
// a runner that has no credential configured at all (403), each an
// ErrAdminAuth that says what to set; with the token it is accepted and the
// runner drains.
func TestDrainNeedsAdminCredentials(t *testing.T) {
	c := newCLICluster(t, false)
	r1 := c.startRunner("r1")
	open := c.startRunnerWith("open", []string{"admin.token="})
	testenv.WaitFor(t, "both runners registered", 20*time.Second, func() bool {
		return r1.r.Status().Registered && open.r.Status().Registered
	})

	// The same config without its admin section.
	b, err := os.ReadFile(c.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	noToken := strings.Replace(string(b), "admin:\n  token: cli-test-admin-token\n", "", 1)
	if noToken == string(b) {
		t.Fatal("the test config has no admin token to remove")
	}
	noTokenPath := filepath.Join(t.TempDir(), "tenure.yaml")
	if err := os.WriteFile(noTokenPath, []byte(noToken), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error, status string) {
		t.Helper()
		if !errors.Is(err, ErrAdminAuth) || !strings.Contains(err.Error(), status) || !strings.Contains(err.Error(), "admin.token") {
			t.Fatalf("drain %s: err = %v, want ErrAdminAuth with %s naming admin.token", what, err, status)
		}
		if r1.r.Status().Draining {
			t.Fatalf("drain %s: the runner is draining", what)
		}
	}
	_, _, err = runCmd(t, noTokenPath, Drain, "r1", "--wait", "0")
	refused("without a token", err, "401")
	_, _, err = runCmdEnv(t, c.cfgPath, []string{"TENURE_ADMIN_TOKEN=not-the-token"}, Drain, "r1", "--wait", "0")
	refused("with a wrong token", err, "401")
	_, _, err = c.run(Drain, "open", "--wait", "0")
	if !errors.Is(err, ErrAdminAuth) || !strings.Contains(err.Error(), "403") {
		t.Fatalf("drain of a runner without credentials: err = %v, want ErrAdminAuth with 403", err)
	}
	if open.r.Status().Draining {
		t.Fatal("a runner without credentials drained")
	}

	c.mustRun(Drain, "r1", "--wait", "0")
	testenv.WaitFor(t, "r1 draining", 10*time.Second, func() bool { return r1.r.Status().Draining })
}

// TestDrainOverMutualTLS: a runner serving its admin API over HTTPS with
// client certificates verified registers an https:// address; the CLI
// verifies it with admin.ca_file and drains with its client certificate,
// no token needed, and is refused without the certificate.
func TestDrainOverMutualTLS(t *testing.T) {
	c := newCLICluster(t, false)
	p := testenv.NewPKI(t)
	x := c.startRunnerWith("m1", []string{"admin.token=", "admin.cert_file=" + p.ServerCert, "admin.key_file=" + p.ServerKey, "admin.client_ca_file=" + p.CA})
	testenv.WaitFor(t, "m1 registered", 20*time.Second, func() bool { return x.r.Status().Registered })
	if addr := x.r.Status().Addr; !strings.HasPrefix(addr, "https://") {
		t.Fatalf("registered admin address %q, want https://", addr)
	}
	env := []string{"TENURE_ADMIN_TOKEN=", "TENURE_ADMIN_CA_FILE=" + p.CA}
	_, _, err := runCmdEnv(t, c.cfgPath, env, Drain, "m1", "--wait", "0")
	if !errors.Is(err, ErrAdminAuth) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("drain over HTTPS without a client certificate: err = %v, want ErrAdminAuth with 401", err)
	}
	env = append(env, "TENURE_ADMIN_CLIENT_CERT_FILE="+p.ClientCert, "TENURE_ADMIN_CLIENT_KEY_FILE="+p.ClientKey)
	if out, errOut, err := runCmdEnv(t, c.cfgPath, env, Drain, "m1", "--wait", "0"); err != nil {
		t.Fatalf("drain with the client certificate: %v\n%s%s", err, out, errOut)
	}
	testenv.WaitFor(t, "m1 draining", 10*time.Second, func() bool { return x.r.Status().Draining })
	// status reads the https:// runner too.
	out, errOut, err := runCmdEnv(t, c.cfgPath, env, Status, "-o", "json")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, errOut)
	}
	var rep StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if r := findRunner(rep, "m1"); r == nil || !r.Reachable {
		t.Fatalf("status over HTTPS: %+v", r)
	}
}
