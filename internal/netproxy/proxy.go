package netproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Mode is how a Proxy treats traffic.
type Mode int

const (
	// Pass forwards traffic both ways.
	Pass Mode = iota
	// Blackhole keeps connections open but forwards nothing until the mode
	// changes, like a network partition: calls through it hang until their
	// timeouts, and new connections are accepted but stall. Data held back
	// is delivered once the mode returns to Pass, as TCP retransmission
	// would deliver it after a partition heals.
	Blackhole
	// Reset closes every connection and refuses new ones (accepts and
	// closes at once), like a dead host.
	Reset
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case Reset:
		return "reset"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// DialTimeout bounds the proxy's connection to the target for each
// accepted client connection; a client whose target cannot be reached in
// time is disconnected.
const DialTimeout = 2 * time.Second

// ErrInvalidTarget is wrapped by New's error for an empty or malformed
// target address.
var ErrInvalidTarget = errors.New("netproxy: invalid target")

// Proxy forwards TCP connections from a loopback listener to its target.
// It is safe for concurrent use.
type Proxy struct {
	target string
	l      net.Listener

	mu      sync.Mutex
	mode    Mode
	delay   time.Duration
	conns   map[*conn]struct{}
	changed chan struct{} // closed and replaced on every mode change
	closed  bool
	wg      sync.WaitGroup
}

type conn struct {
	client, server net.Conn
}

// New starts a proxy to target (host:port) on a free loopback port, in
// Pass mode. Close stops it.
func New(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalidTarget, target, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netproxy: listen for %s: %w", target, err)
	}
	p := &Proxy{target: target, l: l, conns: map[*conn]struct{}{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetMode switches the proxy's behaviour. Reset closes every open
// connection.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	close(p.changed)
	p.changed = make(chan struct{})
	if m == Reset {
		for c := range p.conns {
			c.client.Close()
			c.server.Close()
		}
	}
}

// SetDelay delays every forwarded chunk by d (a slow link); 0 disables.
// The delay is per chunk read, and the chunks of one direction of a
// connection are delayed one after the other: a message that arrives in k
// reads takes about k×d, not d. That suits stalling a connection (the
// fault tests); it does not model a round trip — for that, see
// s3count.WithLatency, which delays each HTTP request and answer once.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Close stops the proxy, closes every connection and waits for its
// goroutines to end. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.l.Close()
	for c := range p.conns {
		c.client.Close()
		c.server.Close()
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode, closed := p.mode, p.closed
		p.mu.Unlock()
		if closed || mode == Reset {
			client.Close()
			continue
		}
		server, err := net.DialTimeout("tcp", p.target, DialTimeout)
		if err != nil {
			client.Close()
			continue
		}
		c := &conn{client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, client, server)
		go p.pipe(c, server, client)
	}
}

// pipe copies src to dst, holding data back while the proxy blackholes.
// Either direction ending closes both sides.
func (p *Proxy) pipe(c *conn, src, dst net.Conn) {
	defer p.wg.Done()
	defer func() {
		c.client.Close()
		c.server.Close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.forward(dst, buf[:n]) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forward writes b to dst once the proxy passes traffic. While the proxy
// blackholes, data is held back and delivered after it heals, unless the
// connection is reset or the proxy closed.
func (p *Proxy) forward(dst net.Conn, b []byte) bool {
	for {
		p.mu.Lock()
		mode, delay, closed, changed := p.mode, p.delay, p.closed, p.changed
		p.mu.Unlock()
		switch {
		case closed || mode == Reset:
			return false
		case mode == Blackhole:
			<-changed
			continue
		}
		if delay > 0 {
			time.Sleep(delay) // simulated latency, not synchronisation
		}
		_, err := dst.Write(b)
		return err == nil
	}
}
