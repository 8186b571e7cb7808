package testenv

import (
	"net"
	"sync"
	"testing"
	"time"
)

// ProxyMode is how a Proxy treats traffic.
type ProxyMode int

const (
	// Pass forwards traffic both ways.
	Pass ProxyMode = iota
	// Blackhole keeps connections open but forwards nothing until the mode
	// changes, like a network partition: calls through it hang until their
	// timeouts, and new connections are accepted but stall.
	Blackhole
	// Reset closes every connection and refuses new ones (accepts and
	// closes at once), like a dead host.
	Reset
)

// Proxy is a loopback TCP proxy in front of one target, for partitioning a
// client from a server in tests. Switching mode affects existing and new
// connections.
type Proxy struct {
	target string
	l      net.Listener

	mu      sync.Mutex
	mode    ProxyMode
	delay   time.Duration
	conns   map[*proxyConn]struct{}
	changed chan struct{} // closed and replaced on every mode change
	closed  bool
	wg      sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
}

// NewProxy starts a proxy to target (host:port) and closes it at cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy listen: %v", err)
	}
	p := &Proxy{target: target, l: l, conns: map[*proxyConn]struct{}{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// SetMode switches the proxy's behaviour. Reset closes every open
// connection.
func (p *Proxy) SetMode(m ProxyMode) {
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

// SetDelay delays every forwarded chunk by d (slow network); 0 disables.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Mode returns the current mode.
func (p *Proxy) Mode() ProxyMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Close stops the proxy and closes every connection.
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
		server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server}
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
func (p *Proxy) pipe(c *proxyConn, src, dst net.Conn) {
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
// blackholes, data is held back (as TCP would keep retransmitting through a
// partition) and delivered after it heals, unless the connection is reset.
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
