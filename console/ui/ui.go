package ui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the path the admin server mounts the console's pages under,
// with http.StripPrefix("/ui", Handler()) so that Handler sees "/",
// "/app.js" and so on.
const Prefix = "/ui/"

// ContentSecurityPolicy is the policy every response of Handler carries:
// scripts, styles and API calls from this origin only, no inline script or
// style attribute, images from this origin or data: URLs (the favicon), and
// no framing (clickjacking of the Drain button).
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed static
var static embed.FS

// asset is one embedded file, read once at init with what its responses
// need: its bytes, and gzipped (nil when that is not smaller), so that a
// browser fetches about a third of the bytes.
type asset struct {
	body  []byte
	gz    []byte
	etag  string
	ctype string
}

var assets, served = load()

// contentTypes names the types of the files the console ships; the
// system's MIME table is not consulted, so the answer does not depend on
// the machine (a .js served as text/plain is refused as a module).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".json": "application/json",
	".txt":  "text/plain; charset=utf-8",
}

// load reads every embedded file. The files are compiled in, so an error
// here is a broken build, not a runtime condition: it panics at init.
func load() (fs.FS, map[string]asset) {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(fmt.Sprintf("console/ui: embedded static directory: %v", err))
	}
	out := map[string]asset{}
	err = fs.WalkDir(sub, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype, ok := contentTypes[path.Ext(name)]
		if !ok {
			ctype = "application/octet-stream"
		}
		a := asset{body: b, etag: base64.RawURLEncoding.EncodeToString(sum[:12]), ctype: ctype}
		var z bytes.Buffer
		zw, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
		if err != nil {
			return err
		}
		if _, err := zw.Write(b); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		if z.Len() < len(b) {
			a.gz = z.Bytes()
		}
		out[name] = a
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("console/ui: reading embedded assets: %v", err))
	}
	return sub, out
}

// Assets returns the embedded files, rooted at the directory that holds
// index.html, for tests and tools that inspect them.
func Assets() fs.FS { return assets }

// Handler serves the console's pages: "/" (and "/index.html") is the
// shell, every other path an embedded asset by name, anything else 404.
// Mount it with http.StripPrefix("/ui", Handler()) under Prefix. Only GET
// and HEAD are answered; conditional requests (If-None-Match) get 304, and
// a request that accepts gzip gets the file gzipped.
func Handler() http.Handler { return http.HandlerFunc(serve) }

func serve(w http.ResponseWriter, req *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "console: "+req.Method+" "+req.URL.Path+": only GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(path.Clean("/"+req.URL.Path), "/")
	if name == "" {
		name = "index.html"
	}
	a, ok := served[name]
	if !ok {
		http.Error(w, "console: no page "+req.URL.Path, http.StatusNotFound)
		return
	}
	h.Set("Content-Type", a.ctype)
	// no-cache: the browser keeps the file but asks every time, so the
	// pages of an upgraded runner are used at once; the ETag makes the
	// question cheap (304).
	h.Set("Cache-Control", "no-cache")
	h.Add("Vary", "Accept-Encoding")
	body, etag := a.body, a.etag
	if a.gz != nil && acceptsGzip(req.Header.Get("Accept-Encoding")) {
		// Each encoding is its own representation, with its own tag.
		body, etag = a.gz, etag+"-gz"
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("ETag", `"`+etag+`"`)
	http.ServeContent(w, req, name, time.Time{}, bytes.NewReader(body))
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip: named
// (or "*") without q=0.
func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "*" {
			continue
		}
		q := strings.ReplaceAll(strings.ToLower(params), " ", "")
		if q == "q=0" || strings.HasPrefix(q, "q=0.") && strings.Trim(q[4:], "0") == "" {
			return false
		}
		return true
	}
	return false
}
