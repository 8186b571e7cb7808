package messaging

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/routing"
)

// deliverFunc is a Deliverer.
type deliverFunc func(context.Context, entity.Delivery) ([]byte, error)

func (f deliverFunc) Deliver(ctx context.Context, d entity.Delivery) ([]byte, error) {
	return f(ctx, d)
}

// lateReader is a client socket whose reads, once paused, are held until a
// write carrying marker is made or fails: grpc's reader then learns of a
// closed connection only after the next call's request went to the socket,
// the interleaving of a SIGKILLed runner on a loaded machine.
type lateReader struct {
	net.Conn
	marker  []byte
	paused  atomic.Bool
	release chan struct{}
	once    sync.Once
	// early: while paused, a write other than the marker's failed
	// first (grpc flushed a frame of its own to the dead socket), so
	// grpc learnt of the close before the call: not the interleaving
	// under test.
	early atomic.Bool
}

func (l *lateReader) Read(b []byte) (int, error) {
	n, err := l.Conn.Read(b)
	if l.paused.Load() {
		<-l.release
	}
	return n, err
}

func (l *lateReader) Write(b []byte) (int, error) {
	n, err := l.Conn.Write(b)
	if l.paused.Load() && err != nil && !bytes.Contains(b, l.marker) {
		l.early.Store(true)
	}
	if l.paused.Load() && (err != nil || bytes.Contains(b, l.marker)) {
		l.once.Do(func() { close(l.release) })
	}
	return n, err
}

func (l *lateReader) Close() error {
	l.once.Do(func() { close(l.release) })
	return l.Conn.Close()
}

// TestCallOnConnectionClosedByPeerIsNotSent: the runner's end of a pooled
// connection closes (its process was killed: the kernel sent FIN) and a
// call is made before grpc's reader has seen it. The call is not sent —
// its request is never written — and says so, so that the Client routes
// it again instead of ending it "outcome unknown". The control: a request
// written while the runner lived stays unknown (TestOutcomeUnknownIsNotRetried).
func TestCallOnConnectionClosedByPeerIsNotSent(t *testing.T) {
	testenv.CheckLeaks(t)
	marker := []byte("probe-after-the-kill")
	var delivered atomic.Int64
	cfg := DefaultConfig()
	cfg.Shards = 1
	srv, err := NewServer(deliverFunc(func(_ context.Context, d entity.Delivery) ([]byte, error) {
		delivered.Add(1)
		return d.Body, nil
	}), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
		<-served
	})
	proxy := testenv.NewProxy(t, lis.Addr().String())

	c, err := NewClient(routing.New(nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var sock atomic.Pointer[lateReader]
	c.pool.wrap = func(nc net.Conn) net.Conn {
		l := &lateReader{Conn: nc, marker: marker, release: make(chan struct{})}
		sock.Store(l)
		return l
	}
	owner := routing.Owner{RunnerID: "b", Addr: proxy.Addr(), Epoch: 5}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	attempt := func(body []byte) (result, error) {
		_, res, err := c.attemptRemote(ctx, &call{kind: kindCall, typ: "echo", id: "e1", body: body}, owner)
		return res, err
	}
	// grpc may flush a frame of its own (a window update, a ping's ack)
	// to the socket after the close and learn of it before the call,
	// which is then refused a new connection: not sent either, but not
	// the interleaving under test. That round is set up again, at most
	// five times.
	warm := 0
	for round := 1; ; round++ {
		proxy.SetMode(testenv.Pass)
		warm++
		// After a round set up again, the pool connects anew: a first
		// attempt may find the connection still being replaced.
		var res result
		var err error
		testenv.WaitFor(t, "a first call answered", 10*time.Second, func() bool {
			res, err = attempt([]byte("warm"))
			return res == finished || round == 1
		})
		if res != finished || err != nil {
			t.Fatalf("round %d: first call: %v, %v; want a reply", round, res, err)
		}
		l := sock.Load()
		l.paused.Store(true)
		proxy.SetMode(testenv.Reset) // the runner's end closes, as at a SIGKILL
		tc := l.Conn.(*trackedConn)
		// The kernel has the FIN at once; the wait's bound is for a machine
		// too loaded to poll (make test failed it once at 5 s).
		testenv.WaitFor(t, "the kernel sees the peer's close", 30*time.Second, func() bool { return peerGone(tc.raw) })

		res, err = attempt(marker)
		if l.early.Load() && round < 5 {
			t.Logf("round %d: grpc wrote to the closed socket before the call (%v, %v); setting it up again", round, res, err)
			continue
		}
		if res != notSent || errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, errNotWritten) {
			t.Fatalf("call on the closed connection: result %d, %v; want not sent (%d), the request not written", res, err, notSent)
		}
		break
	}
	if n := delivered.Load(); n != int64(warm) {
		t.Fatalf("%d deliveries, want %d (the first calls of each round)", n, warm)
	}
}
