package integration

import (
	"context"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// s3Fault is what the S3 proxy does to a request.
type s3Fault int

const (
	s3Pass        s3Fault = iota
	s3Error500            // answer 500 without forwarding
	s3Timeout             // hold the request until the client gives up
	s3DropReply           // forward (the write happens), then drop the answer
	s3Partitioned         // refuse every request (connection reset)
	// s3Blackhole accepts connections and forwards and answers nothing
	// until healed (set to another mode): a request is held until its
	// client gives up, or until the heal, which drops its connection
	// unanswered.
	s3Blackhole
	s3SlowDown // answer 503 SlowDown without forwarding: S3 throttling
)

// s3Proxy is an HTTP reverse proxy in front of the S3 server that injects
// faults with a given probability, for one runner.
type s3Proxy struct {
	srv    *http.Server
	ln     net.Listener
	target *url.URL
	rp     *httputil.ReverseProxy

	mu   sync.Mutex
	mode s3Fault
	prob float64 // chance a request gets mode (1: all)
	rnd  *rand.Rand
	// slow delays every request of method slowMethod by up to slowMax
	// (uniform) before it is forwarded: a slow S3, so that writes are in
	// flight when a fault strikes.
	slowMethod string
	slowMax    time.Duration
	// lag delays every request, of any method, by exactly this much
	// before it is forwarded or faulted.
	lag time.Duration
	// healed is closed when the mode leaves s3Blackhole: the held
	// requests then end, unanswered.
	healed chan struct{}

	injected atomic.Int64
}

func newS3Proxy(t testing.TB, target string) *s3Proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &s3Proxy{ln: ln, target: u, rnd: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1)), healed: make(chan struct{})}
	p.rp = httputil.NewSingleHostReverseProxy(u)
	// Requests the runner gives up on are the faults' point: no log line
	// for each.
	p.rp.ErrorLog = log.New(io.Discard, "", 0)
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve)}
	go p.srv.Serve(ln)
	t.Cleanup(func() { p.srv.Close() })
	return p
}

func (p *s3Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// set makes the proxy apply mode to a share prob of the requests.
func (p *s3Proxy) set(mode s3Fault, prob float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case mode == s3Blackhole && p.mode != s3Blackhole:
		p.healed = make(chan struct{})
	case mode != s3Blackhole && p.mode == s3Blackhole:
		close(p.healed)
	}
	p.mode, p.prob = mode, prob
}

// setLag delays every request by d before it is forwarded (0: none).
func (p *s3Proxy) setLag(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lag = d
}

// slowDown delays each request of method by up to max before it is
// forwarded (0 stops delaying).
func (p *s3Proxy) slowDown(method string, max time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slowMethod, p.slowMax = method, max
}

// delay is how long to hold a request of method.
func (p *s3Proxy) delay(method string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slowMax <= 0 || method != p.slowMethod {
		return p.lag
	}
	return p.lag + time.Duration(p.rnd.Int64N(int64(p.slowMax)))
}

// pick returns the fault for one request, and the channel its heal closes
// (for s3Blackhole).
func (p *s3Proxy) pick() (s3Fault, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == s3Pass || p.rnd.Float64() >= p.prob {
		return s3Pass, nil
	}
	return p.mode, p.healed
}

func (p *s3Proxy) serve(w http.ResponseWriter, r *http.Request) {
	if d := p.delay(r.Method); d > 0 {
		// A slow S3, not a wait for a condition: the request is held as a
		// slow server would hold it, or until its client gives up.
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	fault, healed := p.pick()
	if fault != s3Pass {
		p.injected.Add(1)
	}
	switch fault {
	case s3Error500:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>injected</Message></Error>`)
		return
	case s3Timeout:
		<-r.Context().Done()
		return
	case s3Blackhole:
		// Nothing forwarded, nothing answered: the client gives up on
		// its own timeout, or the heal drops the connection.
		select {
		case <-r.Context().Done():
		case <-healed:
		}
		hijackAndClose(w)
		return
	case s3SlowDown:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>injected: reduce your request rate</Message></Error>`)
		return
	case s3Partitioned:
		hijackAndClose(w)
		return
	case s3DropReply:
		// The request reaches the server and is applied; the answer is lost.
		rec := &discard{header: http.Header{}}
		p.rp.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
		hijackAndClose(w)
		return
	}
	p.rp.ServeHTTP(w, r)
}

// hijackAndClose drops the client's connection without an answer.
func hijackAndClose(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// discard is a ResponseWriter that throws the answer away.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
