package runner

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// Profiling endpoints under /debug/pprof/, in the paths and formats of
// net/http/pprof (go tool pprof reads them), served on the runner's own
// mux behind the admin auth. They are written here on runtime/pprof
// rather than imported: importing net/http/pprof registers its handlers on
// http.DefaultServeMux, which would expose them without authentication in
// every program that embeds a runner and serves the default mux.

// maxProfileSeconds bounds a CPU profile or an execution trace.
const maxProfileSeconds = 300

// registerPprof adds the profiling endpoints to mux, each wrapped by wrap.
func registerPprof(mux *http.ServeMux, wrap func(http.Handler) http.Handler) {
	mux.Handle("GET /debug/pprof/", wrap(http.HandlerFunc(pprofIndex)))
	mux.Handle("GET /debug/pprof/cmdline", wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, strings.Join(os.Args, "\x00"))
	})))
	mux.Handle("GET /debug/pprof/profile", wrap(http.HandlerFunc(pprofCPU)))
	mux.Handle("GET /debug/pprof/trace", wrap(http.HandlerFunc(pprofTrace)))
}

// pprofIndex serves a named profile (/debug/pprof/heap?debug=1), or the
// list of them at /debug/pprof/.
func pprofIndex(w http.ResponseWriter, req *http.Request) {
	name := strings.TrimPrefix(req.URL.Path, "/debug/pprof/")
	if name == "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintln(w, "<html><body><p>Profiles (add ?debug=1 for text):</p><ul>")
		for _, p := range pprof.Profiles() {
			n := html.EscapeString(p.Name())
			fmt.Fprintf(w, "<li><a href=\"%s?debug=1\">%s</a> (%d)</li>\n", n, n, p.Count())
		}
		fmt.Fprintln(w, `<li><a href="profile?seconds=30">profile</a> (CPU, 30s)</li><li><a href="trace?seconds=5">trace</a> (5s)</li></ul></body></html>`)
		return
	}
	p := pprof.Lookup(name)
	if p == nil {
		http.Error(w, "unknown profile "+strconv.Quote(name), http.StatusNotFound)
		return
	}
	debug, _ := strconv.Atoi(req.FormValue("debug"))
	if name == "heap" && req.FormValue("gc") != "" {
		runtime.GC()
	}
	if debug != 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	}
	p.WriteTo(w, debug)
}

// profileSeconds is the ?seconds= of a request, default def, within
// [1, maxProfileSeconds].
func profileSeconds(req *http.Request, def int) (time.Duration, error) {
	s := def
	if v := req.FormValue("seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxProfileSeconds {
			return 0, fmt.Errorf("seconds = %q: must be an integer in [1, %d]", v, maxProfileSeconds)
		}
		s = n
	}
	return time.Duration(s) * time.Second, nil
}

// sleepOrDone waits d or until the client goes away.
func sleepOrDone(req *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-req.Context().Done():
	}
}

// pprofCPU serves a CPU profile of ?seconds= (default 30).
func pprofCPU(w http.ResponseWriter, req *http.Request) {
	record(w, req, "profile", 30, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// pprofTrace serves an execution trace of ?seconds= (default 1).
func pprofTrace(w http.ResponseWriter, req *http.Request) {
	record(w, req, "trace", 1, trace.Start, trace.Stop)
}

// record streams what start writes for ?seconds= (default def), then
// stops; 409 when one is already running (the runtime allows one).
func record(w http.ResponseWriter, req *http.Request, name string, def int, start func(io.Writer) error, stop func()) {
	d, err := profileSeconds(req, def)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	if err := start(w); err != nil {
		w.Header().Del("Content-Disposition")
		http.Error(w, name+": "+err.Error(), http.StatusConflict)
		return
	}
	sleepOrDone(req, d)
	stop()
}
