package s3count

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// Timeouts of the proxy's own connections.
const (
	// DialTimeout bounds the proxy's connection to the target.
	DialTimeout = 5 * time.Second
	// ResponseHeaderTimeout bounds the wait for the target's answer to a
	// forwarded request; the client's own timeout is usually shorter.
	ResponseHeaderTimeout = 60 * time.Second
	// readHeaderTimeout bounds reading a client's request headers.
	readHeaderTimeout = 10 * time.Second
)

// ErrInvalidTarget is wrapped by New's error for a target that is not an
// http(s) URL with a host.
var ErrInvalidTarget = errors.New("s3count: invalid target")

// Fault is what the proxy does with one request.
type Fault int

const (
	// Forward passes the request to the target (no fault).
	Forward Fault = iota
	// Fail503 answers 503 SlowDown without forwarding: the SDK retries it.
	Fail503
	// Reset closes the client's connection without an answer and without
	// forwarding, like a connection reset.
	Reset
	// DropReply forwards the request (a write happens) and then closes the
	// client's connection without its answer: an outcome the client
	// cannot know.
	DropReply
)

// Request describes a request to a fault hook.
type Request struct {
	Op      Op
	Method  string
	Path    string
	Attempt int // the SDK's attempt number (1 for the first), 0 if unknown
}

// Option configures a Proxy.
type Option func(*Proxy)

// WithFaults makes the proxy ask decide what to do with every request
// (called once per request, concurrently).
func WithFaults(decide func(Request) Fault) Option { return func(p *Proxy) { p.decide = decide } }

// FailFirst returns a fault hook that answers the first n requests of op
// with f and forwards everything else.
func FailFirst(op Op, n int, f Fault) func(Request) Fault {
	var mu sync.Mutex
	left := n
	return func(r Request) Fault {
		if r.Op != op {
			return Forward
		}
		mu.Lock()
		defer mu.Unlock()
		if left <= 0 {
			return Forward
		}
		left--
		return f
	}
}

// Proxy is a counting reverse proxy in front of one S3 endpoint, listening
// on a free loopback port. It is safe for concurrent use.
type Proxy struct {
	target *url.URL
	ln     net.Listener
	srv    *http.Server
	rp     *httputil.ReverseProxy
	decide func(Request) Fault
	done   chan struct{}
	// rtt and jitter are the simulated round trip (WithLatency).
	rtt, jitter time.Duration

	mu       sync.Mutex
	counts   Counts
	inFlight int // requests being served
	peak     int // the largest inFlight since the last TakePeakInFlight
}

// New starts a proxy to target, the S3 endpoint's base URL
// ("http://127.0.0.1:7070"). Close stops it.
func New(target string, opts ...Option) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: %q (want http(s)://host:port)", ErrInvalidTarget, target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("s3count: listen for %s: %w", target, err)
	}
	p := &Proxy{target: u, ln: ln, counts: newCounts(), done: make(chan struct{})}
	for _, opt := range opts {
		opt(p)
	}
	p.rp = httputil.NewSingleHostReverseProxy(u)
	p.rp.Transport = &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: DialTimeout}).DialContext,
		ResponseHeaderTimeout: ResponseHeaderTimeout,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       30 * time.Second,
	}
	p.rp.ModifyResponse = func(resp *http.Response) error { return holdAnswer(resp.Request.Context()) }
	p.rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		// The target did not answer: the client sees a 502, counted failed.
		w.WriteHeader(http.StatusBadGateway)
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: readHeaderTimeout,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				p.mu.Lock()
				p.counts.Connections++
				p.mu.Unlock()
			}
		}}
	go func() {
		defer close(p.done)
		p.srv.Serve(ln)
	}()
	return p, nil
}

// URL is the proxy's base URL, to use as the client's S3 endpoint.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Target is the endpoint the proxy forwards to.
func (p *Proxy) Target() string { return p.target.String() }

// Counts returns a snapshot of the counts so far.
func (p *Proxy) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts.clone()
}

// TakePeakInFlight returns the largest number of requests the proxy
// served at once since the previous call (or since it started), and
// starts the next period from the number in flight now.
func (p *Proxy) TakePeakInFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	peak := p.peak
	p.peak = p.inFlight
	return peak
}

// Close stops the proxy and closes its connections. It is idempotent.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	<-p.done
	if t, ok := p.rp.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	req := Request{Op: Classify(r), Method: r.Method, Path: r.URL.Path, Attempt: attempt(r)}
	body := &countingBody{ReadCloser: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body
	}
	head := requestHeadBytes(r)
	p.mu.Lock()
	p.inFlight++
	p.peak = max(p.peak, p.inFlight)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight--
		n := int(body.n.Load())
		p.counts.SentBytes[req.Op] += head + n
		p.counts.BodyBytes[req.Op] += n
		p.mu.Unlock()
	}()
	fault := Forward
	if p.decide != nil {
		fault = p.decide(req)
	}
	p.mu.Lock()
	p.counts.Requests[req.Op]++
	if req.Attempt > 1 {
		p.counts.Retries[req.Op]++
	}
	if fault != Forward {
		p.counts.Injected[req.Op]++
		p.counts.Failed[req.Op]++
		switch fault {
		case Fail503:
			p.answeredLocked(req.Op, http.StatusServiceUnavailable)
		default:
			p.answeredLocked(req.Op, 0)
		}
	}
	p.mu.Unlock()
	if fault != Reset {
		ctx, err := p.holdRequest(r)
		if err != nil {
			reset(w)
			return
		}
		r = r.WithContext(ctx)
	}
	switch fault {
	case Fail503:
		io.Copy(io.Discard, r.Body)
		if holdAnswer(r.Context()) != nil {
			reset(w)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>injected by s3count</Message></Error>`)
		return
	case Reset:
		reset(w)
		return
	case DropReply:
		p.rp.ServeHTTP(&discard{header: http.Header{}}, r.WithContext(context.WithoutCancel(r.Context())))
		reset(w)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		v := recover()
		status := sw.status
		if v != nil {
			status = 0 // the answer was cut off
		}
		p.mu.Lock()
		p.answeredLocked(req.Op, status)
		p.counts.ReceivedBytes[req.Op] += sw.bytes
		if status >= 500 || status == 0 {
			p.counts.Failed[req.Op]++
		}
		p.mu.Unlock()
		if v != nil {
			panic(v)
		}
	}()
	p.rp.ServeHTTP(sw, r)
}

// reset drops the client's connection without an answer.
func reset(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0) // an RST, not an orderly close
			}
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

func (p *Proxy) answeredLocked(op Op, status int) {
	m := p.counts.Status[op]
	if m == nil {
		m = map[int]int{}
		p.counts.Status[op] = m
	}
	m[status]++
}

// statusWriter records the status and the size of the answer.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int // status line, headers and body
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
		s.bytes += responseHeadBytes(code, s.Header())
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer (the
// reverse proxy flushes through it).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
