package deploy

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
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
// machine's paths, the release build (-tags release) linking neither the
// etcd server nor VersityGW, whose `tenure dev` says where to find it,
// and `tenure version` reports the stamped version.
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

	checkRelease(t, out)

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

// devOnlyModules are the modules `tenure dev` and `tenure bench` bring in
// (an etcd server, an S3 gateway with its fiber, NATS, Kafka, RabbitMQ,
// Vault and LDAP clients): the image's binary links none of them.
var devOnlyModules = []string{"go.etcd.io/etcd/server", "github.com/versity/versitygw"}

// checkRelease checks that the binary at path is the release build: built
// with -tags release, linking none of devOnlyModules, and its `tenure dev`
// exits 2 saying how to get one.
func checkRelease(t *testing.T, path string) {
	t.Helper()
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the build info of %s: %v", path, err)
	}
	if !slices.ContainsFunc(info.Settings, func(s debug.BuildSetting) bool {
		return s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), "release")
	}) {
		t.Errorf("build settings %v: want -tags=release", info.Settings)
	}
	var linked []string
	for _, d := range info.Deps {
		for _, m := range devOnlyModules {
			if d.Path == m || strings.HasPrefix(d.Path, m+"/") {
				linked = append(linked, d.Path+"@"+d.Version)
			}
		}
	}
	if len(linked) > 0 {
		t.Errorf("the image's binary links %v: the dev and bench commands' modules", linked)
	}
	t.Logf("%d modules linked", len(info.Deps))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "dev")
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"HOME=" + t.TempDir()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "not in this release build") || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("tenure dev: %v, stderr %q; want exit 2 and one line saying it is not in this build", err, stderr.String())
	}
}
