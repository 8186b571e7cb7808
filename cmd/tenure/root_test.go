package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/runner"
)

// mainRun runs Main as the tenure command would and returns its exit
// status and output.
func mainRun(t *testing.T, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cli := &CLI{Stdout: &out, Stderr: &errOut, Environ: environ, Version: "test"}
	code = Main(testCtx(t, 60*time.Second), cli, args)
	return code, out.String(), errOut.String()
}

// TestExitCodesAndHelp: help goes to stdout with status 0; usage errors
// exit 2 and failures 1, each with one line on stderr naming the command.
func TestExitCodesAndHelp(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // a prefix of stdout ("" : nothing printed)
		stderr string // contained in the one line on stderr
	}{
		{[]string{"--help"}, 0, "Usage:\n  tenure <command>", ""},
		{[]string{"run", "--help"}, 0, "Usage:\n  tenure run [flags]", ""},
		{[]string{"help", "task"}, 0, "Usage:\n  tenure task <command>", ""},
		{[]string{"task", "submit", "-h"}, 0, "Usage:\n  tenure task submit TYPE", ""},
		{[]string{"entity", "state", "get", "--help"}, 0, "Usage:\n  tenure entity state get TYPE ID", ""},
		{[]string{"bogus"}, 2, "", `tenure: unknown command "bogus"`},
		{[]string{"status", "--bogus"}, 2, "", "tenure status: unknown flag: --bogus"},
		{[]string{"--config", missing, "status", "extra"}, 2, "", `tenure status: unexpected argument "extra"`},
		{[]string{"task"}, 2, "", "tenure task: missing command (cancel, get, history, list, purge, replay or submit)"},
		{[]string{"task", "frob"}, 2, "", `tenure task: unknown command "frob"`},
		{[]string{"task", "submit"}, 2, "", "tenure task submit: missing TYPE"},
		{[]string{"call", "counter"}, 2, "", "tenure call: needs TYPE and ID"},
		{[]string{"drain", "r1", "--wait", "soon"}, 2, "", `tenure drain: invalid argument "soon" for "--wait" flag`},
		{[]string{"config", "set", "--rollout", "x"}, 2, "", `tenure config set: invalid argument "x"`},
		{[]string{"status", "-o", "yaml"}, 2, "", `-o "yaml": want text or json`},
		{[]string{"status", "--config", missing}, 1, "", "tenure status: runner: invalid config: config file: open " + missing},
		{[]string{"--config", missing, "task", "list"}, 1, "", "tenure task list: runner: invalid config"},
		{[]string{"version"}, 0, "tenure ", ""},
		{[]string{"--version"}, 0, "tenure ", ""},
		{[]string{"completion", "bash"}, 0, "# bash completion V2 for tenure", ""},
		{[]string{"completion", "zsh"}, 0, "#compdef tenure", ""},
		{[]string{"completion", "fish"}, 0, "# fish completion for tenure", ""},
		{[]string{"completion", "powershell"}, 0, "# powershell completion for tenure", ""},
		// What the shell scripts call on <TAB>: commands, then flags.
		{[]string{"__complete", "ta"}, 0, "task\tsubmit, get, list", "Completion ended with directive"},
		{[]string{"__complete", "task", "submit", "--wa"}, 0, "--wait\t", "Completion ended with directive"},
	} {
		code, out, errOut := mainRun(t, nil, tc.args...)
		if code != tc.code {
			t.Errorf("tenure %q: exit status %d, want %d\nstdout %q\nstderr %q", tc.args, code, tc.code, out, errOut)
		}
		if !strings.HasPrefix(out, tc.stdout) || (tc.stdout == "" && out != "") {
			t.Errorf("tenure %q: stdout %q, want it to start with %q", tc.args, abbrev(out, 300), tc.stdout)
		}
		if tc.stderr == "" && errOut != "" || !strings.Contains(errOut, tc.stderr) || strings.Count(errOut, "\n") > 1 {
			t.Errorf("tenure %q: stderr %q, want one line containing %q", tc.args, errOut, tc.stderr)
		}
	}

	// No command: the usage on stderr, status 2.
	code, out, errOut := mainRun(t, nil)
	if code != 2 || out != "" || !strings.HasPrefix(errOut, "Usage:") || !strings.Contains(errOut, "Commands:") {
		t.Errorf("tenure: exit status %d, stdout %q, stderr %q; want 2 and the usage on stderr", code, out, errOut)
	}
}

// TestVersion builds the tenure binary from this checkout as a user would
// and checks that `version` reports the module's VCS revision (HEAD), and
// that a -X main.version stamp wins.
func TestVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary twice")
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = pkgDir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %q: %v (the test needs the git checkout the module is built from)", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	head := git("rev-parse", "HEAD")
	rev := head[:12]
	dir := t.TempDir()
	// The Go toolchain stamps VCS information only where .git is a
	// directory: in a git worktree (a .git file) it records none. There,
	// build from a clone of HEAD, as a fresh CI checkout would.
	src := pkgDir
	root := git("rev-parse", "--show-toplevel")
	if fi, err := os.Stat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		t.Logf("%s/.git is no directory (a worktree): go build would record no VCS information; building a clone of HEAD", root)
		clone := filepath.Join(dir, "src")
		if out, err := exec.Command("git", "clone", "-q", root, clone).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v\n%s", err, out)
		}
		src = filepath.Join(clone, "cmd", "tenure")
	}
	build := func(name string, flags ...string) VersionInfo {
		t.Helper()
		bin := filepath.Join(dir, name)
		// -buildvcs=true: GOFLAGS may turn VCS stamping off (it does on CI
		// machines that build from a copy); a user's `go install` stamps.
		args := append([]string{"build", "-buildvcs=true", "-o", bin}, flags...)
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %q: %v\n%s", args, err, out)
		}
		out, err := exec.Command(bin, "version", "-o", "json").Output()
		if err != nil {
			t.Fatalf("%s version -o json: %v", name, err)
		}
		var v VersionInfo
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("%s version -o json: %v\n%s", name, err, out)
		}
		text, err := exec.Command(bin, "version").Output()
		if err != nil || !strings.HasPrefix(string(text), "tenure "+v.Version+" (revision "+rev) {
			t.Errorf("%s version: %q (%v), want tenure %s (revision %s…", name, text, err, v.Version, rev)
		}
		return v
	}
	v := build("plain")
	if v.Revision != rev || v.Time == "" || !strings.HasPrefix(v.Go, "go1.") || v.Version == "" || v.Version == "(devel)" {
		t.Errorf("unstamped build: %+v, want revision %s, a time, a version and the Go version", v, rev)
	}
	v = build("stamped", "-ldflags", "-X main.version=v9.9.9")
	if v.Version != "v9.9.9" || v.Revision != rev {
		t.Errorf("stamped build: %+v, want version v9.9.9, revision %s", v, rev)
	}
}

// TestConfigEnv: TENURE_CONFIG names the config file (with no warning
// about it), --config wins over it, and without either the commands say
// how to give one.
func TestConfigEnv(t *testing.T) {
	c := newCLICluster(t, true)
	env := []string{ConfigEnv + "=" + c.cfgPath}
	code, out, errOut := mainRun(t, env, "status", "-o", "json")
	var rep StatusReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Cluster != c.name || errOut != "" {
		t.Fatalf("TENURE_CONFIG=%s tenure status -o json: %d\n%s\nstderr %q", c.cfgPath, code, out, errOut)
	}
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	code, _, errOut = mainRun(t, []string{ConfigEnv + "=" + missing}, "status")
	if code != 1 || !strings.Contains(errOut, missing) {
		t.Errorf("TENURE_CONFIG naming a missing file: %d %q, want 1 naming it", code, errOut)
	}
	code, _, errOut = mainRun(t, []string{ConfigEnv + "=" + missing}, "status", "--config", c.cfgPath)
	if code != 0 {
		t.Errorf("--config over TENURE_CONFIG: %d %q, want the flag to win", code, errOut)
	}
}

// TestEtcdOnlyConfig: status, config get and config set need no S3
// settings; a command that needs S3 names the missing key.
func TestEtcdOnlyConfig(t *testing.T) {
	c := newCLICluster(t, true)
	path := filepath.Join(t.TempDir(), "etcd-only.yaml")
	e := testenv.SharedEtcd(t)
	if err := os.WriteFile(path, fmt.Appendf(nil, "cluster: %s\netcd:\n  endpoints: [%s]\n", c.name, e.Endpoint()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"status", "-o", "json"},
		{"config", "get", "-o", "json"},
		{"config", "set", "detachment.mode=observe", "--rollout", "10", "-o", "json"},
	} {
		code, out, errOut := mainRun(t, nil, append([]string{"--config", path}, args...)...)
		if code != 0 || !json.Valid([]byte(out)) || errOut != "" {
			t.Errorf("tenure %q with an etcd-only config: %d\n%s\nstderr %q", args, code, out, errOut)
		}
	}
	var rep ConfigReport
	if err := json.Unmarshal([]byte(c.mustRun(ConfigGet, "-o", "json")), &rep); err != nil || rep.Version != 1 || rep.Rollout != 10 {
		t.Errorf("config after the etcd-only set: %+v (%v), want version 1 at 10%%", rep, err)
	}
	code, _, errOut := mainRun(t, nil, "--config", path, "task", "list")
	if code != 1 || !strings.Contains(errOut, "s3.bucket") {
		t.Errorf("task list with an etcd-only config: %d %q, want 1 naming s3.bucket", code, errOut)
	}
	// Another problem is still reported, the bucket aside.
	code, _, errOut = mainRun(t, []string{"TENURE_SHARDS=0"}, "--config", path, "status")
	if code != 1 || !strings.Contains(errOut, "shards") {
		t.Errorf("status with an etcd-only config and shards=0: %d %q, want 1 naming shards", code, errOut)
	}
}

// TestAdminToken: the CLI's admin client sends the configured token on
// every request, and a refusal says which key to set.
func TestAdminToken(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "admin.token required", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `{"attached": true}`)
	}))
	defer srv.Close()
	cli := &CLI{Version: "test"}
	ctx := testCtx(t, 10*time.Second)
	for _, tc := range []struct {
		token, want string
		err         error
	}{
		{"s3cret", "Bearer s3cret", nil},
		{"", "", ErrAdminAuth},
		{"wrong", "Bearer wrong", ErrAdminAuth},
	} {
		cfg := runner.DefaultConfig()
		cfg.Admin.Token = tc.token
		adm, err := newAdmin(cli, cfg)
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		_, err = adm.do(ctx, http.MethodPost, adminURL(srv.URL, "/admin/drain"))
		if !errors.Is(err, tc.err) || len(got) != 1 || got[0] != tc.want {
			t.Errorf("token %q: err %v, Authorization %q; want %v, %q", tc.token, err, got, tc.err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), "TENURE_ADMIN_TOKEN") {
			t.Errorf("token %q: %v does not say to set TENURE_ADMIN_TOKEN", tc.token, err)
		}
		adm.close()
	}
}
