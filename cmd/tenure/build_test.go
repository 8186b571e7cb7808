package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// pkgDir is this package's directory, read before any test starts the
// shared S3 gateway (which changes the working directory).
var pkgDir, _ = os.Getwd()

// buildTenure builds the tenure binary with the go build flags given, for
// the scenarios that start runner processes (in tests os.Executable is the
// test binary) and the checks of the release build.
func buildTenure(t *testing.T, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tenure")
	ctx := testCtx(t, 5*time.Minute)
	build := exec.CommandContext(ctx, "go", append(append([]string{"build"}, flags...), "-o", bin, ".")...)
	build.Dir = pkgDir
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
