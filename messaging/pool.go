package messaging

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/messaging/internal/callpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
)

// pool keeps one grpc.ClientConn per call address: HTTP/2 multiplexes
// every concurrent call to a runner over it. Connections are made on first
// use and closed once unused for idle (checked on the way in, every idle/2:
// no goroutine of its own), or on close.
type pool struct {
	tls   *tls.Config
	limit int
	idle  time.Duration

	mu        sync.RWMutex
	conns     map[string]*poolConn
	lastSweep time.Time
	closed    bool

	// wrap, when set (by tests only), wraps each socket grpc is given.
	wrap func(net.Conn) net.Conn
}

type poolConn struct {
	cc       *grpc.ClientConn
	client   callpb.EntityServiceClient
	lastUsed atomic.Int64  // unix nanoseconds
	writes   atomic.Uint64 // the write sequence of its sockets (trackedConn)

	// Calls go on Streams (callStream), streamsPerConn of them picked in
	// turn; unary once the runner answered that it serves no Stream (a
	// runner older than it), for as long as the connection lives.
	streams []atomic.Pointer[callStream]
	rr      atomic.Uint32
	unary   atomic.Bool
	mu      sync.Mutex // opening a stream, closing
	closed  bool
}

func newPool(tlsConf *tls.Config, limit int, idle time.Duration) *pool {
	return &pool{tls: tlsConf, limit: limit, idle: idle, conns: map[string]*poolConn{}, lastSweep: time.Now()}
}

// get returns the connection to addr, making it if needed. Making one does
// not dial: grpc connects on the first call, and that call's outcome says
// whether the request was sent.
func (p *pool) get(addr string) (*poolConn, error) {
	now := time.Now()
	p.mu.RLock()
	pc, ok := p.conns[addr]
	sweep := now.Sub(p.lastSweep) > p.idle/2
	closed := p.closed
	p.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if ok && !sweep {
		pc.lastUsed.Store(now.UnixNano())
		return pc, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if sweep {
		p.sweepLocked(now)
	}
	if pc, ok := p.conns[addr]; ok {
		pc.lastUsed.Store(now.UnixNano())
		return pc, nil
	}
	creds := insecure.NewCredentials()
	if p.tls != nil {
		creds = credentials.NewTLS(p.tls)
	}
	pc = &poolConn{streams: make([]atomic.Pointer[callStream], streamsPerConn)}
	wrap := p.wrap
	// The dialer tracks each socket's writes (trackedConn), which tells a
	// call queued on a connection its peer had already closed from one
	// that may have reached the runner.
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := dialTracked(ctx, addr, &pc.writes)
		if err != nil || wrap == nil {
			return c, err
		}
		return wrap(c), nil
	}
	// passthrough: a call address is host:port from a runner record, not a
	// name to resolve through grpc's DNS resolver and its re-resolution.
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(dial),
		grpc.WithStatsHandler(sentTracker{}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(p.limit), grpc.MaxCallSendMsgSize(p.limit)),
		grpc.WithInitialWindowSize(streamWindow(p.limit)), grpc.WithInitialConnWindowSize(connWindow(p.limit)),
	)
	if err != nil {
		return nil, fmt.Errorf("messaging: connection to call address %q: %w", addr, err)
	}
	pc.cc, pc.client = cc, callpb.NewEntityServiceClient(cc)
	pc.lastUsed.Store(now.UnixNano())
	p.conns[addr] = pc
	return pc, nil
}

// sweepLocked closes connections unused for p.idle. A call that took one
// just before may still be using it; it then fails before sending (the
// connection is closing) and is retried, or fails unknown if it had sent:
// both honest outcomes, and rare since the connection was idle.
func (p *pool) sweepLocked(now time.Time) {
	p.lastSweep = now
	for addr, pc := range p.conns {
		if now.Sub(time.Unix(0, pc.lastUsed.Load())) > p.idle {
			pc.close()
			delete(p.conns, addr)
		}
	}
}

// size returns the number of open connections.
func (p *pool) size() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.conns)
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for addr, pc := range p.conns {
		pc.close()
		delete(p.conns, addr)
	}
}

// sentTracker records, per call, whether grpc handed the request's headers
// to a connection, and on which socket: the line between "provably not
// sent" and "may have reached the owner" (sendProbe decides).
//
// grpc-go (internal/transport, http2Client.NewStream) emits stats.OutHeader
// only once the stream's HEADERS frame is queued on a live connection's
// writer. Every failure before that point — no connection ready under
// WaitForReady(false) (dial refused, TLS failure, transient failure), the
// picker failing, the connection closing or draining before the stream
// was queued — returns without it, and the request's bytes never left this
// process. After it, a frame may be on the wire, so the server may run the
// call even when the RPC then fails with Unavailable: grpc's own status
// codes cannot tell those apart, so the probe, not the code, decides. The
// one case after it that is still provably unsent is a socket that had
// stopped writing before the call began (trackedConn: the peer had closed
// it). A transparent retry by grpc (a stream the server provably did not
// process) can only make the probe say "may have been sent" where it was
// not needed: conservative.
type sentTracker struct{}

func (sentTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (sentTracker) HandleRPC(ctx context.Context, s stats.RPCStats) {
	h, ok := s.(*stats.OutHeader)
	if !ok {
		return
	}
	if p, ok := ctx.Value(sentKey{}).(*sendProbe); ok {
		if a, ok := h.LocalAddr.(trackedAddr); ok {
			p.conn.Store(a.conn)
		} else {
			p.conn.Store(nil)
		}
		p.queued.Add(1)
	}
}

func (sentTracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (sentTracker) HandleConn(context.Context, stats.ConnStats) {}
