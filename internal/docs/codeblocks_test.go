package docs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// compiledDocs are the documents whose every Go code block must compile.
var compiledDocs = []string{"docs/embedding.md"}

// snippetImports are the packages a code block that is not a whole file
// may use without importing them: the block is compiled with the imports
// of those it names (as "pkg.").
var snippetImports = map[string]string{
	"context": "context",
	"errors":  "errors",
	"fmt":     "fmt",
	"http":    "net/http",
	"json":    "encoding/json",
	"log":     "log",
	"os":      "os",
	"signal":  "os/signal",
	"slog":    "log/slog",
	"strconv": "strconv",
	"syscall": "syscall",
	"testing": "testing",
	"time":    "time",

	"entity":     "github.com/tenurehq/tenure/entity",
	"runner":     "github.com/tenurehq/tenure/runner",
	"schedule":   "github.com/tenurehq/tenure/entity/schedule",
	"task":       "github.com/tenurehq/tenure/entity/task",
	"tenuretest": "github.com/tenurehq/tenure/tenuretest",
}

var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```")

// TestDocCodeBlocksCompile: every Go code block of the documents users
// copy from compiles against the code. A block that starts with a package
// clause is a program of its own; the other blocks of a document are
// declarations, compiled together in one package, in the document's
// order, with the imports of the packages they name.
func TestDocCodeBlocksCompile(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	work, err := os.MkdirTemp(filepath.Join(root, "internal", "docs"), "_blocks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	var dirs []string
	where := map[string]string{} // dir → what it holds, for the failure message
	for _, doc := range compiledDocs {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		var decls []string
		for i, m := range goBlock.FindAllSubmatchIndex(b, -1) {
			code := string(b[m[2]:m[3]])
			line := 1 + strings.Count(string(b[:m[2]]), "\n")
			if isFile(code) {
				dir := filepath.Join(work, fmt.Sprintf("%s_%d", base(doc), i))
				write(t, dir, code)
				dirs = append(dirs, dir)
				where[dir] = fmt.Sprintf("%s:%d", doc, line)
				continue
			}
			decls = append(decls, fmt.Sprintf("// %s:%d\n%s", doc, line, code))
		}
		if len(decls) == 0 {
			continue
		}
		body := strings.Join(decls, "\n")
		var imports []string
		for name, path := range snippetImports {
			if regexp.MustCompile(`\b` + name + `\.`).MatchString(body) {
				imports = append(imports, fmt.Sprintf("\t%q", path))
			}
		}
		slices.Sort(imports)
		src := "package blocks\n\nimport (\n" + strings.Join(imports, "\n") + "\n)\n\n" + body
		dir := filepath.Join(work, base(doc)+"_decls")
		write(t, dir, src)
		dirs = append(dirs, dir)
		where[dir] = doc + " (its declaration blocks, together)"
	}
	if len(dirs) == 0 {
		t.Fatal("no Go code blocks found")
	}
	args := []string{"vet"}
	for _, d := range dirs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "./"+filepath.ToSlash(rel))
	}
	cmd := exec.Command(gobin, args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		var held []string
		for _, d := range dirs {
			held = append(held, filepath.Base(d)+" = "+where[d])
		}
		t.Fatalf("go vet of the documents' code blocks: %v\n%s\nblocks: %s", err, out, strings.Join(held, "; "))
	}
	t.Logf("%d programs or packages of code blocks compiled", len(dirs))
}

// isFile reports whether a code block is a whole Go file (starts with a
// package clause, comments aside).
func isFile(code string) bool {
	for _, l := range strings.Split(code, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return strings.HasPrefix(l, "package ")
	}
	return false
}

func base(doc string) string { return strings.TrimSuffix(filepath.Base(doc), ".md") }

func write(t *testing.T, dir, src string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}
