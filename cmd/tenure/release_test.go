package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

// devOnlyModules are the modules only `tenure dev` and `tenure bench` need
// (internal/embedded): the release build must link none of them.
var devOnlyModules = []string{"go.etcd.io/etcd/server", "github.com/versity/versitygw"}

// TestReleaseBuild builds tenure as the image does (-tags release) and
// checks that it links neither the etcd server nor VersityGW, and that
// `tenure dev` and `tenure bench`, whatever their arguments, exit 2 with
// one line saying how to get them, while the other commands are there.
func TestReleaseBuild(t *testing.T) {
	bin := buildTenure(t, "-tags", "release")
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("reading the build info of %s: %v", bin, err)
	}
	if !slices.ContainsFunc(info.Settings, func(s debug.BuildSetting) bool {
		return s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), "release")
	}) {
		t.Errorf("build settings %v: want -tags=release", info.Settings)
	}
	var paths []string
	for _, d := range info.Deps {
		paths = append(paths, d.Path)
		for _, m := range devOnlyModules {
			if d.Path == m || strings.HasPrefix(d.Path, m+"/") {
				t.Errorf("the release build links %s %s", d.Path, d.Version)
			}
		}
	}
	// The check above reads a real list: the clients stay.
	if !slices.Contains(paths, "go.etcd.io/etcd/client/v3") {
		t.Fatalf("the release build's modules lack go.etcd.io/etcd/client/v3: %v", paths)
	}
	t.Logf("release build: %d modules", len(info.Deps))

	run := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		// No config to find, none to load: the commands below need none.
		cmd.Dir = t.TempDir()
		cmd.Env = []string{"HOME=" + t.TempDir()}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			code = ee.ExitCode()
		default:
			t.Fatalf("tenure %q: %v", args, err)
		}
		return code, out.String(), errOut.String()
	}
	for _, tc := range []struct {
		args []string
		hint string
	}{
		{[]string{"dev"}, "`make dev` or `go run ./cmd/tenure dev`"},
		{[]string{"dev", "--runners", "3", "--data", "x"}, "`make dev` or `go run ./cmd/tenure dev`"},
		{[]string{"dev", "--help"}, "`make dev` or `go run ./cmd/tenure dev`"},
		{[]string{"-o", "json", "bench", "all", "--quick"}, "`go run ./cmd/tenure bench SCENARIO...`"},
	} {
		code, stdout, stderr := run(tc.args...)
		want := "tenure " + tc.args[slices.IndexFunc(tc.args, func(a string) bool { return a == "dev" || a == "bench" })] +
			" is not in this release build: run it from a checkout of tenure (" + tc.hint + "), or build a binary with it: `go build ./cmd/tenure`\n"
		if code != 2 || stdout != "" || stderr != want {
			t.Errorf("tenure %q: exit %d, stdout %q, stderr %q; want exit 2 and the one line %q", tc.args, code, stdout, stderr, want)
		}
	}
	if code, stdout, stderr := run("--help"); code != 0 || !strings.Contains(stdout, "(not in this release build)") || !strings.Contains(stdout, "status") {
		t.Errorf("tenure --help: exit %d, stderr %q; want the commands, dev and bench marked as not in this build:\n%s", code, stderr, stdout)
	}
	if code, stdout, stderr := run("version"); code != 0 || !strings.HasPrefix(stdout, "tenure ") {
		t.Errorf("tenure version: exit %d, stdout %q, stderr %q; want the version", code, stdout, stderr)
	}
}
