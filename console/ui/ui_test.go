package ui

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// mounted is the handler as the admin server mounts it.
func mounted() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+Prefix, http.StripPrefix("/ui", Handler()))
	return mux
}

func get(t *testing.T, h http.Handler, target string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(Assets(), name)
	if err != nil {
		t.Fatalf("asset %s: %v", name, err)
	}
	return string(b)
}

// all returns every embedded file's name and content.
func all(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(Assets(), ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out[name] = read(t, name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestIndexAtRoot(t *testing.T) {
	index := read(t, "index.html")
	for _, c := range []struct {
		h      http.Handler
		target string
	}{{Handler(), "/"}, {Handler(), "/index.html"}, {mounted(), "/ui/"}} {
		rec := get(t, c.h, c.target)
		if rec.Code != http.StatusOK || rec.Body.String() != index {
			t.Fatalf("GET %s: %d, body %.60q; want 200 and index.html", c.target, rec.Code, rec.Body.String())
		}
		if ct := rec.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("GET %s: Content-Type %q", c.target, ct)
		}
	}
	// The mux sends /ui to /ui/, where the relative asset and API paths resolve.
	if rec := get(t, mounted(), "/ui"); rec.Code/100 != 3 || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want a redirect to /ui/", rec.Code, rec.Header().Get("Location"))
	}
	for _, target := range []string{"/ui/nope.js", "/ui/views/", "/ui/views"} {
		if rec := get(t, mounted(), target); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", target, rec.Code)
		}
	}
	// A path that climbs out stays inside the embedded files.
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.URL.Path = "/../../go.mod"
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET %s: %d, want 404", req.URL.Path, rec.Code)
	}
	rec = httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", rec.Code)
	}
}

func TestHeaders(t *testing.T) {
	for name := range all(t) {
		rec := get(t, mounted(), Prefix+name)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s%s: %d", Prefix, name, rec.Code)
		}
		h := rec.Header()
		want := map[string]string{
			"Content-Security-Policy": ContentSecurityPolicy,
			"X-Content-Type-Options":  "nosniff",
			"Cache-Control":           "no-cache",
		}
		for k, v := range want {
			if h.Get(k) != v {
				t.Errorf("%s: %s %q, want %q", name, k, h.Get(k), v)
			}
		}
		etag := h.Get("ETag")
		if etag == "" {
			t.Fatalf("%s: no ETag", name)
		}
		if rec := get(t, mounted(), Prefix+name, "If-None-Match", etag); rec.Code != http.StatusNotModified {
			t.Errorf("%s: If-None-Match with its ETag: %d, want 304", name, rec.Code)
		}
	}
	csp := ContentSecurityPolicy
	for _, d := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:",
		"connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, d) {
			t.Errorf("CSP %q lacks %q", csp, d)
		}
	}
	if strings.Contains(csp, "unsafe-") {
		t.Errorf("CSP %q allows unsafe sources", csp)
	}
}

var (
	htmlRef  = regexp.MustCompile(`(?i)\s(?:src|href)="([^"#]+)"`)
	jsImport = regexp.MustCompile(`(?m)^\s*import\s[^;]*?from\s+"([^"]+)"`)
)

// TestReferencedAssets follows index.html's src/href and the modules'
// imports: each must be embedded and served with its content type (a
// module served as anything but JavaScript is refused by the browser).
func TestReferencedAssets(t *testing.T) {
	wantType := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".html": "text/html; charset=utf-8"}
	seen := map[string]bool{"index.html": true}
	queue := []string{"index.html"}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		body := read(t, name)
		re := htmlRef
		if path.Ext(name) == ".js" {
			re = jsImport
		}
		for _, m := range re.FindAllStringSubmatch(body, -1) {
			ref := m[1]
			if strings.HasPrefix(ref, "data:") {
				continue
			}
			target := path.Join(path.Dir(name), ref)
			if seen[target] {
				continue
			}
			seen[target] = true
			queue = append(queue, target)
			rec := get(t, mounted(), Prefix+target)
			if rec.Code != http.StatusOK {
				t.Errorf("%s references %q: GET %s%s: %d", name, ref, Prefix, target, rec.Code)
				continue
			}
			if ct := rec.Header().Get("Content-Type"); ct != wantType[path.Ext(target)] {
				t.Errorf("%s: Content-Type %q, want %q", target, ct, wantType[path.Ext(target)])
			}
		}
	}
	for name := range all(t) {
		if !seen[name] {
			t.Errorf("%s is embedded but nothing references it", name)
		}
	}
	if len(seen) < 10 {
		t.Errorf("followed %d files from index.html, want the shell, the style sheet and every module", len(seen))
	}
}

// TestNothingFromElsewhere: the console loads nothing from another origin
// (no CDN, no web font) and has no inline script or style the CSP would
// block; its modules never turn data into markup or code.
func TestNothingFromElsewhere(t *testing.T) {
	remote := regexp.MustCompile(`(?i)(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|` +
		`import\s[^;]*?from\s*["'](?:https?:)?//|import\(\s*["'](?:https?:)?//|@import|fetch\(\s*["'\x60](?:https?:)?//`)
	for name, body := range all(t) {
		if m := remote.FindString(body); m != "" {
			t.Errorf("%s loads from another origin: %q", name, m)
		}
	}
	index := read(t, "index.html")
	// Every script is an external file: <script ... src="…"></script>.
	for _, m := range regexp.MustCompile(`(?is)<script\b([^>]*)>(.*?)</script>`).FindAllStringSubmatch(index, -1) {
		if !strings.Contains(m[1], `src="`) || strings.TrimSpace(m[2]) != "" {
			t.Errorf("index.html has an inline script: %.80q", m[0])
		}
	}
	for _, re := range []*regexp.Regexp{regexp.MustCompile(`(?i)\sstyle\s*=`), regexp.MustCompile(`(?i)\son[a-z]+\s*=`), regexp.MustCompile(`(?i)<style`)} {
		if m := re.FindString(index); m != "" {
			t.Errorf("index.html has an inline style or handler: %q", m)
		}
	}
	unsafe := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*"style"|javascript:`)
	for name, body := range all(t) {
		if path.Ext(name) == ".js" {
			if m := unsafe.FindString(body); m != "" {
				t.Errorf("%s uses %q: data must go in as text", name, m)
			}
		}
	}
}

// testIDs are the data-testid values of the console contract that the
// browser test finds; each must be in the shell or in the module that
// creates the element.
var testIDs = []string{
	"nav-cluster", "nav-shards", "nav-timeline", "nav-entities", "nav-tasks", "nav-schedules", "nav-config",
	"runner-row", "shard-cell", "shard-detail", "timeline-event",
	"entity-type", "entity-id", "entity-lookup", "entity-state", "entity-op", "entity-input", "entity-call", "entity-call-output",
	"task-status", "task-type", "task-entity", "task-row", "task-replay", "task-cancel", "task-detail",
	"schedule-row", "singleton-row",
	"config-document", "config-key", "config-value", "config-rollout", "config-apply", "config-result", "config-runner-row",
	"auth-token", "auth-save", "banner", "last-updated",
}

func TestTestIDs(t *testing.T) {
	files := all(t)
	var text strings.Builder
	for _, b := range files {
		text.WriteString(b)
	}
	s := text.String()
	found := func(id string) bool {
		return strings.Contains(s, `data-testid="`+id+`"`) || strings.Contains(s, `testid: "`+id+`"`) ||
			strings.Contains(s, `"data-testid", "`+id+`"`)
	}
	for _, id := range testIDs {
		if !found(id) {
			t.Errorf("data-testid %q is in no asset", id)
		}
	}
	if !strings.Contains(s, "testid: `drain-${") {
		t.Error("the drain button's data-testid drain-<runner> is in no asset")
	}
	for _, attr := range []string{"data-runner", "data-shard", "data-holder", "data-state", "data-kind", "data-ref", "data-field"} {
		if !strings.Contains(s, `"`+attr+`"`) {
			t.Errorf("attribute %s is set by no asset", attr)
		}
	}
}

// TestGzip: a browser that accepts gzip gets the file gzipped, under its
// own ETag; one that does not (or refuses it with q=0) gets it as is.
func TestGzip(t *testing.T) {
	for name, body := range all(t) {
		rec := get(t, mounted(), Prefix+name, "Accept-Encoding", "gzip, deflate, br")
		if rec.Header().Get("Content-Encoding") != "gzip" {
			if len(body) > 1000 {
				t.Errorf("%s (%d bytes): not gzipped", name, len(body))
			}
			continue
		}
		zr, err := gzip.NewReader(bytes.NewReader(rec.Body.Bytes()))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || string(got) != body {
			t.Fatalf("%s: gunzipped body differs from the asset (err %v)", name, err)
		}
		if !strings.Contains(rec.Header().Get("Vary"), "Accept-Encoding") {
			t.Errorf("%s: Vary %q lacks Accept-Encoding", name, rec.Header().Get("Vary"))
		}
		plain := get(t, mounted(), Prefix+name)
		if plain.Header().Get("Content-Encoding") != "" || plain.Body.String() != body {
			t.Errorf("%s without Accept-Encoding: encoded %q", name, plain.Header().Get("Content-Encoding"))
		}
		if plain.Header().Get("ETag") == rec.Header().Get("ETag") {
			t.Errorf("%s: the gzipped and the plain file share the ETag %s", name, rec.Header().Get("ETag"))
		}
		if r := get(t, mounted(), Prefix+name, "Accept-Encoding", "gzip", "If-None-Match", rec.Header().Get("ETag")); r.Code != http.StatusNotModified {
			t.Errorf("%s: If-None-Match with the gzip ETag: %d, want 304", name, r.Code)
		}
	}
	for header, want := range map[string]bool{"gzip": true, "GZIP;q=0.5": true, "*": true, "br, gzip;q=0": false,
		"gzip; q=0.000": false, "deflate": false, "": false, "identity, *;q=1": true} {
		if got := acceptsGzip(header); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", header, got, want)
		}
	}
}

func TestAssetSize(t *testing.T) {
	const limit = 80 << 10
	files := all(t)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	})
	total, zipped := 0, 0
	for _, n := range names {
		z := len(files[n])
		if a := served[n]; a.gz != nil {
			z = len(a.gz)
		}
		total += len(files[n])
		zipped += z
		t.Logf("%6d %6d %s", len(files[n]), z, n)
	}
	t.Logf("%6d %6d bytes in %d files, uncompressed and as served gzipped", total, zipped, len(files))
	if total > limit {
		t.Errorf("the console's assets are %d bytes, over the %d bound: keep the pages light", total, limit)
	}
}
