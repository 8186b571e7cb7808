package docs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/runnermetrics"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/memstore"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

// root is the repository's root directory, absolute. TestMain finds it
// before any test runs: starting the shared S3 server changes the working
// directory (see internal/embedded).
var root string

// TestMain finds the repository root, then runs the tests with the shared
// servers of internal/testenv, stopped when they end.
func TestMain(m *testing.M) {
	var err error
	if root, err = findRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		os.Exit(1)
	}
	testenv.Main(m)
}

// module is the module path that marks the repository root's go.mod.
const module = "github.com/tenurehq/tenure"

// findRoot walks up from the working directory to the directory whose
// go.mod declares the module.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module "+module+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", module)
		}
		dir = parent
	}
}

// document is one Markdown file, split into what the checks look at.
type document struct {
	rel   string // path relative to the root, slash-separated
	prose []line // text outside code, inline code spans blanked out
	code  []code // inline code spans and fenced code blocks
	// anchors are the heading anchors GitHub gives the document.
	anchors map[string]bool
}

// eachText calls f with every prose line and every code span or block of
// d, with the line it starts on.
func (d document) eachText(f func(n int, text string)) {
	for _, l := range d.prose {
		f(l.n, l.text)
	}
	for _, c := range d.code {
		f(c.n, c.text)
	}
}

// line is a line of prose with its line number.
type line struct {
	n    int
	text string
}

// code is a piece of code: an inline span, or a fenced block's body.
type code struct {
	n    int    // line number (of the span, or of the fence's first body line)
	lang string // the fence's info string; "" for inline spans
	text string
}

// documents reads docs/*.md and README.md. It fails the test when there
// are fewer than the four documents of docs/ and the README, so that a
// moved directory cannot make every check pass on nothing.
func documents(t *testing.T) []document {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, filepath.Join(root, "README.md"))
	if len(paths) < 5 {
		t.Fatalf("found %d documents (%v): want docs/README.md, architecture.md, operations.md, embedding.md and README.md", len(paths), paths)
	}
	var out []document
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, parse(filepath.ToSlash(rel), string(b)))
	}
	return out
}

var (
	fence      = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([^`\\s]*)")
	codeSpan   = regexp.MustCompile("(`+)(.+?)(`+)")
	heading    = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]*)(?:\s+"[^"]*")?\)`)
	refLink    = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(\S+)`)
	autoLink   = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9+.-]*:[^>\s]*)>`)
	bareURL    = regexp.MustCompile(`\b(?:https?|ftp)://\S+`)
)

// parse splits a Markdown text into prose, code and heading anchors. It
// knows what the documents use: ATX headings, fenced code blocks, inline
// code spans, inline links and reference definitions.
func parse(rel, text string) document {
	d := document{rel: rel, anchors: map[string]bool{}}
	var fenceMark, fenceLang string
	var block []string
	blockStart := 0
	for i, l := range strings.Split(text, "\n") {
		n := i + 1
		if fenceMark != "" {
			if m := fence.FindStringSubmatch(l); m != nil && strings.HasPrefix(m[1], fenceMark) && strings.TrimSpace(l) == m[1] {
				d.code = append(d.code, code{n: blockStart, lang: fenceLang, text: strings.Join(block, "\n")})
				fenceMark, block = "", nil
				continue
			}
			block = append(block, l)
			continue
		}
		if m := fence.FindStringSubmatch(l); m != nil {
			fenceMark, fenceLang, blockStart = m[1], m[2], n+1
			continue
		}
		// Code spans: kept as code, blanked in the prose (a span's text is
		// not a link, and its brackets must not look like one).
		prose := codeSpan.ReplaceAllStringFunc(l, func(s string) string {
			m := codeSpan.FindStringSubmatch(s)
			if len(m[1]) == len(m[3]) {
				d.code = append(d.code, code{n: n, text: m[2]})
			}
			return strings.Repeat(" ", len(s))
		})
		d.prose = append(d.prose, line{n: n, text: prose})
		if m := heading.FindStringSubmatch(l); m != nil {
			d.addAnchor(m[1])
		}
	}
	return d
}

// addAnchor records the anchor GitHub derives from a heading's text: the
// text of its inline code and links kept, lower case, every character but
// letters, digits, '-', '_' and spaces dropped, spaces made '-'. A
// repeated anchor gets "-1", "-2", … as on GitHub.
func (d *document) addAnchor(title string) {
	title = inlineLink.ReplaceAllStringFunc(title, func(s string) string {
		return s[strings.Index(s, "[")+1 : strings.Index(s, "]")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	a := b.String()
	for i := 1; d.anchors[a]; i++ {
		a = fmt.Sprintf("%s-%d", b.String(), i)
	}
	d.anchors[a] = true
}

// where names a place in a document for an error message.
func (d document) where(n int) string { return fmt.Sprintf("%s:%d", d.rel, n) }

// metricName is what a metric name looks like in the documents.
var metricName = regexp.MustCompile(`\btenure_[a-z0-9_]+`)

// histogramSuffixes are the series a histogram family adds to its name.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// TestMetricNamesExist: every tenure_… name in the documents, prose and code
// alike, is a metric family the code registers, or a histogram family's
// _bucket, _sum or _count series.
func TestMetricNamesExist(t *testing.T) {
	docs := documents(t)
	reg := registeredMetrics(t)
	checked := map[string]bool{}
	for _, d := range docs {
		check := func(n int, text string) {
			for _, name := range metricName.FindAllString(text, -1) {
				checked[name] = true
				if !reg.known(name) {
					t.Errorf("%s: %s: the code registers no such metric (registered: %s)", d.where(n), name, strings.Join(reg.sorted(), ", "))
				}
			}
		}
		d.eachText(check)
	}
	if len(checked) < 20 {
		t.Errorf("only %d metric names found in the documents: is the parser still finding them?", len(checked))
	}
	t.Logf("%d metric names in the documents checked against the %d families the code registers", len(checked), len(reg.names))
}

// metrics is a set of registered metric family names.
type metrics struct {
	names map[string]bool // name → is a histogram
}

// known reports whether name is a registered family, or a series a
// registered histogram family exports.
func (m metrics) known(name string) bool {
	if _, ok := m.names[name]; ok {
		return true
	}
	for _, suf := range histogramSuffixes {
		if base, ok := strings.CutSuffix(name, suf); ok && m.names[base] {
			return true
		}
	}
	return false
}

func (m metrics) sorted() []string {
	var out []string
	for n := range m.names {
		if strings.HasPrefix(n, "tenure_") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// recorder is a prometheus.Registerer that keeps the names of what is
// registered with it. Unlike a registry's Gather, it sees every family,
// labelled ones that have no series yet included.
type recorder struct{ m metrics }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// Register records the names c describes.
func (r *recorder) Register(c prometheus.Collector) error {
	hist := false
	switch c.(type) {
	case prometheus.Histogram, *prometheus.HistogramVec:
		hist = true
	}
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.m.names[m[1]] = hist
		}
	}
	return nil
}

// MustRegister records every collector.
func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Register(c)
	}
}

// Unregister forgets nothing: the names were registered once.
func (r *recorder) Unregister(prometheus.Collector) bool { return true }

// noRunnerStore is a runner store for constructors that keep it without
// calling it; a call would panic on the nil interface.
type noRunnerStore struct{ storage.RunnerStore }

// registeredMetrics returns every metric family the code registers: the
// entity host's, the sharding manager's and the S3 observer's, recorded as
// their constructors register them, and the runner's own, gathered from a
// running runner.
func registeredMetrics(t *testing.T) metrics {
	t.Helper()
	rec := &recorder{m: metrics{names: map[string]bool{}}}
	host, err := entity.NewHost(task.NewStore(memstore.New()), noRunnerStore{}, "docs", entity.DefaultConfig(), entity.WithRegistry(rec))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := host.Close(ctx); err != nil {
		t.Fatal(err)
	}
	meta := storage.ClusterMeta{Shards: 1, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName}
	if _, err := sharding.New(noRunnerStore{}, storage.RunnerInfo{ID: "docs", Weight: 1}, meta, sharding.DefaultConfig(), sharding.WithRegistry(rec)); err != nil {
		t.Fatal(err)
	}
	s3store.MetricsObserver(rec)
	for name, hist := range runnermetrics.Gather(t) {
		rec.m.names[name] = hist
	}
	return rec.m
}

// word is a run of the characters a config key, a path or a URL is made
// of; configKey is what a config key looks like: two lower-case segments
// joined by a dot.
var (
	word      = regexp.MustCompile(`[A-Za-z0-9_.:/@*-]+`)
	configKey = regexp.MustCompile(`^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$`)
	envVar    = regexp.MustCompile(`\bTENURE_[A-Z0-9_]+`)
)

// fileExtensions end the file names that look like config keys
// (tenure.yaml, main.go).
var fileExtensions = []string{"go", "md", "yaml", "yml", "json", "sh", "txt", "mod", "sum", "pem", "log", "toml"}

// ignoredEnv are TENURE_* variables the documents name on purpose although
// they set no key: examples of what config loading ignores, and
// TENURE_CONFIG, which names the CLI's config file.
var ignoredEnv = []string{"TENURE_PORT", "TENURE_SERVICE_HOST", "TENURE_CONFIG"}

// TestConfigKeysExist: every config key in the documents' code (inline
// spans and fenced blocks, Go blocks excepted: `g.count` there is a field)
// is one the runner's configuration knows (runner.Keys, which `tenure run
// --help` prints), and every TENURE_* variable sets one, or is an exec:
// handler's TENURE_TASK_* variable, or one the documents name as ignored.
func TestConfigKeysExist(t *testing.T) {
	keys := runner.Keys()
	env := map[string]bool{}
	for _, k := range keys {
		env[runner.EnvName(k)] = true
	}
	checked := map[string]bool{}
	for _, d := range documents(t) {
		for _, c := range d.code {
			if c.lang == "go" {
				continue
			}
			for _, k := range configKeysIn(c.text) {
				checked[k] = true
				if !slices.Contains(keys, k) {
					t.Errorf("%s: `%s` looks like a config key but the runner has no such key (keys: %s)", d.where(c.n), k, strings.Join(keys, ", "))
				}
			}
		}
		check := func(n int, text string) {
			for _, v := range envVar.FindAllString(text, -1) {
				if !env[v] && !strings.HasPrefix(v, runner.TaskEnvPrefix) && !slices.Contains(ignoredEnv, v) {
					t.Errorf("%s: %s names no config key (a key's variable is the key in upper case with _ for ., as %s for etcd.endpoints)", d.where(n), v, runner.EnvName("etcd.endpoints"))
				}
			}
		}
		d.eachText(check)
	}
	if len(checked) < 30 {
		t.Errorf("only %d config keys found in the documents: is the parser still finding them?", len(checked))
	}
	t.Logf("%d config keys in the documents checked against the runner's %d", len(checked), len(keys))
}

// configKeysIn returns the words of a piece of code that look like config
// keys: a whole word (so not part of a host name, a path or a URL), not
// followed by '(' (a method call), trailing punctuation aside, that is not a
// file name.
func configKeysIn(text string) []string {
	var out []string
	for _, loc := range word.FindAllStringIndex(text, -1) {
		w := strings.TrimRight(text[loc[0]:loc[1]], ".:")
		if !configKey.MatchString(w) || (loc[1] < len(text) && text[loc[1]] == '(') {
			continue
		}
		if slices.Contains(fileExtensions, w[strings.LastIndex(w, ".")+1:]) {
			continue
		}
		out = append(out, w)
	}
	return out
}

// scheme starts a link that names its protocol: a URL, mailto:, ….
var scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// TestLinksResolve: every link in the documents is relative and resolves
// to a file or directory inside the repository; one with a #fragment into a
// Markdown file names one of its headings. Links that leave the repository
// (URLs, absolute paths, ../ past the root) fail: the documentation must
// stand on its own.
func TestLinksResolve(t *testing.T) {
	docs := documents(t)
	byPath := map[string]document{}
	for _, d := range docs {
		byPath[d.rel] = d
	}
	n := 0
	for _, d := range docs {
		for _, l := range d.prose {
			var targets []string
			for _, m := range inlineLink.FindAllStringSubmatch(l.text, -1) {
				targets = append(targets, m[1])
			}
			if m := refLink.FindStringSubmatch(l.text); m != nil {
				targets = append(targets, m[1])
			}
			for _, m := range autoLink.FindAllStringSubmatch(l.text, -1) {
				targets = append(targets, m[1])
			}
			// A URL left once the links are taken out is a bare one
			// (GitHub links it).
			rest := autoLink.ReplaceAllString(inlineLink.ReplaceAllString(l.text, ""), "")
			for _, u := range bareURL.FindAllString(rest, -1) {
				targets = append(targets, u)
			}
			for _, target := range targets {
				n++
				if err := checkLink(d, target, byPath); err != nil {
					t.Errorf("%s: link %q: %v", d.where(l.n), target, err)
				}
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d links found in the documents: is the parser still finding them?", n)
	}
	t.Logf("%d links checked", n)
}

// checkLink resolves one link target of d.
func checkLink(d document, target string, byPath map[string]document) error {
	switch {
	case target == "":
		return fmt.Errorf("empty target")
	case scheme.MatchString(target):
		return fmt.Errorf("points outside the repository; link to a file of the repository instead")
	case strings.HasPrefix(target, "/"):
		return fmt.Errorf("an absolute path points outside the repository; use a path relative to %s", d.rel)
	}
	path, frag, _ := strings.Cut(target, "#")
	rel := d.rel
	if path != "" {
		rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(d.rel), path)))
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("resolves to %s, outside the repository", rel)
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
			return fmt.Errorf("resolves to %s, which does not exist", rel)
		}
	}
	if frag == "" || !strings.HasSuffix(rel, ".md") {
		return nil
	}
	target2, ok := byPath[rel]
	if !ok {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		target2 = parse(rel, string(b))
	}
	if !target2.anchors[frag] {
		var all []string
		for a := range target2.anchors {
			all = append(all, a)
		}
		slices.Sort(all)
		return fmt.Errorf("%s has no heading with anchor #%s (anchors: %s)", rel, frag, strings.Join(all, ", "))
	}
	return nil
}
