package deploy

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// buildTimeout bounds the release build of the binary (a cold cache
// compiles the whole module without cgo).
const buildTimeout = 10 * time.Minute

// TestDockerfile: the image recipe builds with deploy/build-binary.sh (the
// one place of the build flags, which TestBinaryStatic runs) on golang:1.26
// and ships the binary alone on distroless/static as a non-root user.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var from, runs, final []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		instr, rest, _ := strings.Cut(l, " ")
		switch instr {
		case "FROM":
			from = append(from, rest)
			final = nil
		case "RUN":
			runs = append(runs, rest)
		}
		if instr != "" && !strings.HasPrefix(instr, "#") {
			final = append(final, l)
		}
	}
	if len(from) != 2 || !strings.Contains(from[0], "golang:1.26 ") || from[1] != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("FROM %q: want a golang:1.26 build stage, then gcr.io/distroless/static-debian12:nonroot", from)
	}
	if !slices.ContainsFunc(runs, func(r string) bool { return strings.Contains(r, "sh deploy/build-binary.sh /out/tenure ") }) {
		t.Errorf("RUN %q: want the build through deploy/build-binary.sh", runs)
	}
	if strings.Contains(string(b), "go build") {
		t.Error("the Dockerfile runs go build itself: the flags belong in deploy/build-binary.sh")
	}
	for _, want := range []string{"COPY --from=build /out/tenure /tenure", "USER 65532:65532", `ENTRYPOINT ["/tenure"]`, `CMD ["run"]`} {
		if !slices.Contains(final, want) {
			t.Errorf("the final stage lacks %s (it has %q)", want, final)
		}
	}
}

// TestBinaryStatic builds tenure exactly as the image does
// (deploy/build-binary.sh) and checks the result: a static ELF (no
// interpreter, no shared libraries), stripped, without the build
// machine's paths, and `tenure version` reports the stamped version.
func TestBinaryStatic(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux; the ELF checks need a linux build")
	}
	const version = "v0.0.0-deploytest"
	out := filepath.Join(t.TempDir(), "tenure")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	build := exec.CommandContext(ctx, "sh", filepath.Join(root, "deploy", "build-binary.sh"), out, version)
	// The test's own cgo setting (on, for -race) must not leak in: the
	// script sets it.
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	start := time.Now()
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build-binary.sh: %v\n%s", err, b)
	}
	t.Logf("built in %s", time.Since(start).Round(time.Millisecond))

	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %s: the binary is dynamically linked", p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("DT_NEEDED %v (%v): want none", libs, err)
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: -s did not apply")
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bin, []byte(root)) {
		t.Errorf("the binary contains the build path %s: -trimpath did not apply", root)
	}

	vctx, vcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer vcancel()
	cmd := exec.CommandContext(vctx, out, "version")
	cmd.Env = []string{"HOME=" + t.TempDir()}
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("tenure version: %v", err)
	}
	if !regexp.MustCompile(`(^|\s)` + regexp.QuoteMeta(version) + `(\s|$)`).Match(got) {
		t.Errorf("tenure version printed %q, want the stamped %s", got, version)
	}
}
