package messaging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/messaging/internal/callpb"
	"github.com/tenurehq/tenure/routing"
	"github.com/tenurehq/tenure/storage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// streamTestConfig is the tests' config: one shard.
func streamTestConfig() Config {
	cfg := DefaultConfig()
	cfg.Shards = 1
	return cfg
}

// methodCounter is a server stats handler counting, per method, the RPCs
// begun and the messages received: on Stream, its frames.
type methodCounter struct {
	mu     sync.Mutex
	rpcs   map[string]int
	frames map[string]int
}

type methodKey struct{}

func newMethodCounter() *methodCounter {
	return &methodCounter{rpcs: map[string]int{}, frames: map[string]int{}}
}

func (m *methodCounter) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, info.FullMethodName[strings.LastIndex(info.FullMethodName, "/")+1:])
}

func (m *methodCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	method, _ := ctx.Value(methodKey{}).(string)
	m.mu.Lock()
	defer m.mu.Unlock()
	switch s.(type) {
	case *stats.Begin:
		m.rpcs[method]++
	case *stats.InPayload:
		m.frames[method]++
	}
}

func (m *methodCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (m *methodCounter) HandleConn(context.Context, stats.ConnStats) {}

func (m *methodCounter) counts(method string) (rpcs, frames int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rpcs[method], m.frames[method]
}

// serveGRPC serves svc on a grpc server of its own with opts (a stats
// handler, a service without Stream) and returns its address.
func serveGRPC(t *testing.T, svc callpb.EntityServiceServer, opts ...grpc.ServerOption) string {
	t.Helper()
	return serveGRPCB(t, svc, opts...)
}

// serveGRPCB is serveGRPC for a test or a benchmark.
func serveGRPCB(t testing.TB, svc callpb.EntityServiceServer, opts ...grpc.ServerOption) string {
	t.Helper()
	g := grpc.NewServer(opts...)
	callpb.RegisterEntityServiceServer(g, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Serve(lis)
	}()
	t.Cleanup(func() {
		g.Stop()
		<-done
	})
	return lis.Addr().String()
}

func newTestServer(t *testing.T, d Deliverer) *Server {
	t.Helper()
	srv, err := NewServer(d, streamTestConfig())
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func newTestClient(t *testing.T) *Client {
	t.Helper()
	c, err := NewClient(routing.New(nil), streamTestConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// gate holds the dials of a Client's pool until opened, so that calls
// queue on a stream that is not open yet.
type gate struct {
	open chan struct{}
	fail atomic.Bool // the held dial fails instead
}

func (g *gate) wrap(c net.Conn) net.Conn {
	<-g.open
	if g.fail.Load() {
		// grpc sees a connection closed at once: the stream's open fails.
		c.Close()
	}
	return c
}

// queued is the number of calls queued on pc's streams, not yet sent.
func queued(pc *poolConn) int {
	n := 0
	for i := range pc.streams {
		if s := pc.streams[i].Load(); s != nil {
			s.mu.Lock()
			n += len(s.queue)
			s.mu.Unlock()
		}
	}
	return n
}

func echoDeliverer(_ context.Context, d entity.Delivery) ([]byte, error) { return d.Body, nil }

// TestStreamBatchesCalls: calls queued while the stream opens go in one
// frame per stream, and all are answered; calls whose frames together
// exceed one message's wire limit are split into several frames, each
// under it.
func TestStreamBatchesCalls(t *testing.T) {
	testenv.CheckLeaks(t)
	for _, tc := range []struct {
		name      string
		calls     int
		body      int
		maxFrames int
	}{
		// One frame per stream.
		{"small", 50, 16, streamsPerConn},
		// Two do not fit in one message: one frame each.
		{"near the limit", 3, 4<<20 - 1024, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counter := newMethodCounter()
			addr := serveGRPC(t, newTestServer(t, deliverFunc(echoDeliverer)), grpc.StatsHandler(counter),
				grpc.MaxRecvMsgSize(streamTestConfig().wireLimit()), grpc.MaxSendMsgSize(streamTestConfig().wireLimit()))
			c := newTestClient(t)
			g := &gate{open: make(chan struct{})}
			c.pool.wrap = g.wrap
			owner := routing.Owner{RunnerID: "b", Addr: addr, Epoch: 5}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := make(chan error, tc.calls)
			for i := range tc.calls {
				body := bytes.Repeat([]byte{byte('a' + i%26)}, tc.body)
				go func() {
					got, _, err := c.attemptRemote(ctx, &call{kind: kindCall, typ: "echo", id: fmt.Sprint("e", i), body: body}, owner)
					if err == nil && !bytes.Equal(got, body) {
						err = fmt.Errorf("call %d: reply of %d bytes is not its request's", i, len(got))
					}
					errs <- err
				}()
			}
			pc, err := c.pool.get(addr)
			if err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, "every call queued", 10*time.Second, func() bool { return queued(pc) == tc.calls })
			close(g.open)
			for range tc.calls {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			rpcs, frames := counter.counts("Stream")
			if unary, _ := counter.counts("Call"); unary != 0 || rpcs < 1 || rpcs > streamsPerConn {
				t.Fatalf("%d unary calls, %d streams; want 0, 1..%d", unary, rpcs, streamsPerConn)
			}
			if frames < 1 || frames > tc.maxFrames {
				t.Fatalf("%d calls queued before the stream opened went in %d frames, want 1..%d", tc.calls, frames, tc.maxFrames)
			}
		})
	}
}

// TestStreamCarriesDeadlineAndCancel: a call's remaining time travels as a
// duration and bounds the handler's context; a caller that gives up
// cancels the handler's context, and its other calls on the stream go on.
func TestStreamCarriesDeadlineAndCancel(t *testing.T) {
	testenv.CheckLeaks(t)
	seen := make(chan time.Duration, 1)
	entered := make(chan struct{}, 1)
	ended := make(chan error, 1)
	counter := newMethodCounter()
	addr := serveGRPC(t, newTestServer(t, deliverFunc(func(ctx context.Context, d entity.Delivery) ([]byte, error) {
		switch d.ID {
		case "deadline":
			dl, _ := ctx.Deadline()
			seen <- time.Until(dl)
			return nil, nil
		case "cancel":
			entered <- struct{}{}
			<-ctx.Done()
			ended <- ctx.Err()
			return nil, ctx.Err()
		}
		return d.Body, nil
	})), grpc.StatsHandler(counter))
	c := newTestClient(t)
	owner := routing.Owner{RunnerID: "b", Addr: addr, Epoch: 5}

	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Second)
	defer cancel()
	if _, _, err := c.attemptRemote(ctx, &call{kind: kindCall, typ: "echo", id: "deadline"}, owner); err != nil {
		t.Fatal(err)
	}
	if left := <-seen; left > 7*time.Second || left < 5*time.Second {
		t.Fatalf("the handler had %s left; want a little under 7s", left)
	}

	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, _, err := c.attemptRemote(cctx, &call{kind: kindCall, typ: "echo", id: "cancel"}, owner)
		done <- err
	}()
	<-entered
	ccancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler's context ended with %v, want Canceled", err)
	}
	if err := <-done; !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v; want unknown, Canceled", err)
	}
	if got, _, err := c.attemptRemote(ctx, &call{kind: kindCall, typ: "echo", id: "after", body: []byte("x")}, owner); err != nil || string(got) != "x" {
		t.Fatalf("call after the cancel: %q, %v", got, err)
	}
	if rpcs, _ := counter.counts("Stream"); rpcs != 1 {
		t.Fatalf("%d streams opened, want 1 for the three calls", rpcs)
	}
}

// unaryOnly serves Call only, as a runner older than Stream does.
type unaryOnly struct {
	callpb.UnimplementedEntityServiceServer
	srv *Server
}

func (u unaryOnly) Call(ctx context.Context, req *callpb.CallRequest) (*callpb.CallReply, error) {
	return u.srv.Call(ctx, req)
}

// TestStreamFallsBackToUnary: a runner without Stream answers
// UNIMPLEMENTED; the calls on that stream were not sent (it read none),
// the client remembers it for the connection and uses Call, and each call
// is delivered once.
func TestStreamFallsBackToUnary(t *testing.T) {
	testenv.CheckLeaks(t)
	var delivered atomic.Int64
	counter := newMethodCounter()
	addr := serveGRPC(t, unaryOnly{srv: newTestServer(t, deliverFunc(func(_ context.Context, d entity.Delivery) ([]byte, error) {
		delivered.Add(1)
		return d.Body, nil
	}))}, grpc.StatsHandler(counter))
	v := newStreamView(t, addr)
	c, err := NewClient(v, streamTestConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		got, err := c.Call(ctx, "echo", "e1", []byte(fmt.Sprint(i)))
		if err != nil || string(got) != fmt.Sprint(i) {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
	}
	if n := delivered.Load(); n != 3 {
		t.Fatalf("%d deliveries, want 3", n)
	}
	pc, _ := c.pool.get(addr)
	if !pc.unary.Load() {
		t.Fatal("the connection is not marked unary")
	}
	if streams, _ := counter.counts("Stream"); streams != 1 {
		t.Fatalf("%d streams tried, want 1", streams)
	}
	if unary, _ := counter.counts("Call"); unary != 3 {
		t.Fatalf("%d unary calls, want 3", unary)
	}
}

// newStreamView returns a routing table where runner b at addr holds the
// tests' one shard.
func newStreamView(t *testing.T, addrs ...string) *routing.Table {
	t.Helper()
	tbl := routing.New(nil)
	tbl.Apply(storage.MembershipBatch{Revision: 1, Listing: true})
	rev := int64(1)
	for i, addr := range addrs {
		rev++
		id := fmt.Sprint("r", i)
		tbl.Apply(storage.MembershipBatch{Revision: rev, Events: []storage.MembershipEvent{{Runner: &storage.RunnerEvent{
			Kind: storage.EventPut, ID: id, Runner: storage.RunnerInfo{ID: id, CallAddr: addr}, Revision: rev}}}})
	}
	shard := storage.ShardID{Group: storage.DefaultGroup, Index: 0}
	rev++
	tbl.Apply(storage.MembershipBatch{Revision: rev, Events: []storage.MembershipEvent{{Lock: &storage.LockEvent{
		Kind: storage.EventPut, Shard: shard, Lock: storage.ShardLock{Shard: shard, RunnerID: "r0", Epoch: 5}, Revision: rev}}}})
	return tbl
}

// TestStreamFailRules: a stream that ends fails each call not answered by
// the contract: queued (not handed to SendMsg) → not sent; handed to
// SendMsg on a socket that stopped writing at or before the frame began →
// not sent, not written; handed to it before the socket's last write →
// unknown; and on a runner without Stream → not sent.
func TestStreamFailRules(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	go io.Copy(io.Discard, b)
	pc := &poolConn{streams: make([]atomic.Pointer[callStream], 1)}
	tc := newTrackedConn(a, &pc.writes)
	if _, err := tc.Write([]byte("headers")); err != nil {
		t.Fatal(err)
	}
	early := pc.writes.Load() - 1 // a frame begun before the last write
	a.Close()
	if _, err := tc.Write([]byte("frame")); err == nil {
		t.Fatal("write on a closed pipe succeeded")
	}
	late := pc.writes.Load() // a frame begun after the socket stopped writing

	newStream := func() *callStream {
		ctx, cancel := context.WithCancel(context.Background())
		s := &callStream{pc: pc, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), probe: &sendProbe{},
			calls: map[uint64]*pending{}}
		s.probe.queued.Store(1)
		s.probe.conn.Store(tc)
		pc.streams[0].Store(s)
		return s
	}
	mk := func(s *callStream, sent bool, before uint64) *pending {
		p := &pending{ch: make(chan streamResult, 1)}
		if !s.enqueue(p) {
			t.Fatal("enqueue on a live stream failed")
		}
		if sent {
			s.mu.Lock()
			p.sent, p.before = true, before
			s.queue = s.queue[:len(s.queue)-1]
			s.mu.Unlock()
		}
		return p
	}
	s := newStream()
	sentLate := mk(s, true, late)
	sentEarly := mk(s, true, early)
	queuedP := mk(s, false, 0)
	broken := errors.New("stream broken")
	s.fail(broken, true)
	if r := <-queuedP.ch; r.state != stateNotSent || r.unsent {
		t.Errorf("queued call: %+v; want not sent", r)
	}
	if r := <-sentLate.ch; r.state != stateNotSent || !r.unsent {
		t.Errorf("call sent after the socket stopped writing: %+v; want not sent, not written", r)
	}
	if r := <-sentEarly.ch; r.state != stateUnknown {
		t.Errorf("call sent before the socket's last write: %+v; want unknown", r)
	}
	if s.enqueue(&pending{ch: make(chan streamResult, 1)}) {
		t.Error("a failed stream took a call")
	}
	if pc.streams[0].Load() != nil {
		t.Error("a failed stream still fills its slot")
	}

	// A transparent retry by grpc (queued twice): not analysed.
	s = newStream()
	s.probe.queued.Store(2)
	p := mk(s, true, late)
	s.fail(broken, true)
	if r := <-p.ch; r.state != stateUnknown {
		t.Errorf("call on a stream queued twice: %+v; want unknown", r)
	}

	s = newStream()
	p = mk(s, true, early)
	s.fail(unimplementedErr(), true)
	if r := <-p.ch; r.state != stateNotSent || !pc.unary.Load() {
		t.Errorf("call on a runner without Stream: %+v, unary %v; want not sent, unary", r, pc.unary.Load())
	}
}

// TestStreamOpenFailsNotSent: calls queued while the stream opens, whose
// open then fails, are not sent, and nothing is delivered.
func TestStreamOpenFailsNotSent(t *testing.T) {
	testenv.CheckLeaks(t)
	addr, delivered := serveCounting(t)
	c, g := gatedClient(t)
	owner := routing.Owner{RunnerID: "b", Addr: addr, Epoch: 5}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type out struct {
		res result
		err error
	}
	done := make(chan out, 2)
	for i := range 2 {
		go func() {
			_, res, err := c.attemptRemote(ctx, &call{kind: kindCall, typ: "echo", id: fmt.Sprint("e", i)}, owner)
			done <- out{res, err}
		}()
	}
	pc, err := c.pool.get(addr)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "both calls queued", 10*time.Second, func() bool { return queued(pc) == 2 })
	g.fail.Store(true)
	close(g.open)
	for range 2 {
		o := <-done
		if o.res != notSent || !errors.Is(o.err, ErrNotSent) || errors.Is(o.err, ErrOutcomeUnknown) {
			t.Fatalf("call queued on a stream that did not open: %v, %v; want not sent", o.res, o.err)
		}
	}
	if n := delivered.Load(); n != 0 {
		t.Fatalf("%d deliveries, want 0", n)
	}
}

// TestStreamCallerGivesUpWhileQueued: a caller whose context ends while
// its request is still queued takes it back: not sent, never delivered.
func TestStreamCallerGivesUpWhileQueued(t *testing.T) {
	testenv.CheckLeaks(t)
	addr, delivered := serveCounting(t)
	c, g := gatedClient(t)
	owner := routing.Owner{RunnerID: "b", Addr: addr, Epoch: 5}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, res, err := c.attemptRemote(ctx, &call{kind: kindCall, typ: "echo", id: "e1"}, owner)
		if res != notSent {
			err = fmt.Errorf("result %d: %w", res, err)
		}
		done <- err
	}()
	pc, err := c.pool.get(addr)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the call queued", 10*time.Second, func() bool { return queued(pc) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, ErrNotSent) || !errors.Is(err, context.Canceled) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("call given up while queued: %v; want not sent, Canceled", err)
	}
	close(g.open)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if _, _, err := c.attemptRemote(ctx2, &call{kind: kindCall, typ: "echo", id: "e2"}, owner); err != nil {
		t.Fatal(err)
	}
	if n := delivered.Load(); n != 1 {
		t.Fatalf("%d deliveries, want 1 (the second call's)", n)
	}
}

func unimplementedErr() error {
	return status.Error(codes.Unimplemented, "method Stream not implemented")
}

// TestServerStopDrainsStream: the server contract on Stop, on a raw
// stream. A request read before Stop runs and is answered; the stream
// says draining; a request read after gets not_run and never reaches the
// Deliverer; once the caller closes its side and the running request is
// answered, the stream ends and the graceful stop returns, long before
// its bound.
func TestServerStopDrainsStream(t *testing.T) {
	testenv.CheckLeaks(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	var delivered sync.Map
	srv := newTestServer(t, deliverFunc(func(_ context.Context, d entity.Delivery) ([]byte, error) {
		delivered.Store(d.ID, true)
		if d.ID == "before" {
			close(entered)
			<-release
		}
		return d.Body, nil
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := callpb.NewEntityServiceClient(cc).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := func(seq uint64, id string) *callpb.CallFrame {
		return &callpb.CallFrame{Requests: []*callpb.StreamRequest{{Seq: seq, TimeoutMicros: 20e6,
			Request: &callpb.CallRequest{Type: "echo", Id: id, Payload: []byte(id)}}}}
	}
	if err := st.Send(req(1, "before")); err != nil {
		t.Fatal(err)
	}
	<-entered
	stopped := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		srv.Stop(context.Background()) // Config.StopTimeout: 10 s
		stopped <- time.Since(start)
	}()
	f, err := st.Recv()
	if err != nil || !f.Draining || len(f.Replies) != 0 {
		t.Fatalf("first frame after Stop: %v, %v; want draining, no reply", f, err)
	}
	if err := st.Send(req(2, "after")); err != nil {
		t.Fatal(err)
	}
	f, err = st.Recv()
	if err != nil || len(f.NotRun) != 1 || f.NotRun[0] != 2 {
		t.Fatalf("answer to the request read after Stop: %v, %v; want not_run [2]", f, err)
	}
	close(release)
	f, err = st.Recv()
	if err != nil || len(f.Replies) != 1 || f.Replies[0].Seq != 1 || string(f.Replies[0].Reply.GetPayload()) != "before" {
		t.Fatalf("answer to the request read before Stop: %v, %v; want its reply", f, err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if f, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after closing: %v, %v; want the stream's end", f, err)
	}
	if d := <-stopped; d > 5*time.Second {
		t.Fatalf("Stop took %s: the stream held the graceful stop", d)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if _, ok := delivered.Load("after"); ok {
		t.Fatal("the request read after Stop was delivered")
	}
}

// TestServerStopWithCallsInFlight: through a Client. A call running when
// its runner stops is answered; a call made once the runner drains is
// never delivered there and is routed to the shard's next holder; the
// stop does not wait out its bound.
func TestServerStopWithCallsInFlight(t *testing.T) {
	testenv.CheckLeaks(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	var onA, onB atomic.Int64
	a := newTestServer(t, deliverFunc(func(_ context.Context, d entity.Delivery) ([]byte, error) {
		onA.Add(1)
		if d.ID == "slow" {
			close(entered)
			<-release
		}
		return append([]byte("a:"), d.Body...), nil
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(lis) }()
	addrB := serveGRPC(t, newTestServer(t, deliverFunc(func(_ context.Context, d entity.Delivery) ([]byte, error) {
		onB.Add(1)
		return append([]byte("b:"), d.Body...), nil
	})))
	tbl := newStreamView(t, lis.Addr().String(), addrB)
	c, err := NewClient(tbl, streamTestConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow := make(chan reply, 1)
	go func() {
		body, err := c.Call(ctx, "echo", "slow", []byte("x"))
		slow <- reply{body, err}
	}()
	<-entered
	stopped := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		a.Stop(context.Background())
		stopped <- time.Since(start)
	}()
	pc, err := c.pool.get(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the client saw the stream drain", 10*time.Second, func() bool {
		for i := range pc.streams {
			if pc.streams[i].Load() != nil {
				return false
			}
		}
		return true
	})
	// A call made now goes to a again: its next stream finds a closed, and
	// the request is not sent. Then the shard moves to b, as a stopping
	// runner hands it over, and the call follows it.
	after := make(chan reply, 1)
	go func() {
		body, err := c.Call(ctx, "echo", "after", []byte("y"))
		after <- reply{body, err}
	}()
	testenv.WaitFor(t, "an attempt on the stopping runner not sent", 10*time.Second, func() bool {
		return testutil.ToFloat64(c.metrics.reroutes.WithLabelValues(rerouteNotSent)) >= 1
	})
	shard := storage.ShardID{Group: storage.DefaultGroup, Index: 0}
	tbl.Apply(storage.MembershipBatch{Revision: 100, Events: []storage.MembershipEvent{{Lock: &storage.LockEvent{
		Kind: storage.EventPut, Shard: shard, Lock: storage.ShardLock{Shard: shard, RunnerID: "r1", Epoch: 6}, Revision: 100}}}})
	if r := <-after; r.err != nil || string(r.body) != "b:y" {
		t.Fatalf("call after the drain: %q, %v; want b's reply", r.body, r.err)
	}
	close(release)
	if r := <-slow; r.err != nil || string(r.body) != "a:x" {
		t.Fatalf("call running at Stop: %q, %v; want a's reply", r.body, r.err)
	}
	if d := <-stopped; d > 5*time.Second {
		t.Fatalf("Stop took %s: the stream held the graceful stop", d)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if n := onA.Load(); n != 1 {
		t.Fatalf("a: %d deliveries, want 1 (the call running at Stop)", n)
	}
}

// reply is the outcome of a call made in the background.
type reply struct {
	body []byte
	err  error
}

// drainingServer answers its first stream's first frame "not run,
// draining" and waits for the caller to close its side; its later streams
// echo.
type drainingServer struct {
	callpb.UnimplementedEntityServiceServer
	streams  atomic.Int64
	closedBy chan error // how the first stream's caller ended it
}

func (d *drainingServer) Stream(st callpb.EntityService_StreamServer) error {
	first := d.streams.Add(1) == 1
	for {
		f, err := st.Recv()
		if err != nil {
			if first {
				d.closedBy <- err
			}
			return nil
		}
		out := &callpb.ReplyFrame{}
		for _, r := range f.Requests {
			if first {
				out.NotRun = append(out.NotRun, r.Seq)
				out.Draining = true
				continue
			}
			out.Replies = append(out.Replies, &callpb.StreamReply{Seq: r.Seq,
				Reply: &callpb.CallReply{Outcome: &callpb.CallReply_Payload{Payload: r.Request.Payload}}})
		}
		if err := st.Send(out); err != nil {
			return err
		}
	}
}

// TestStreamNotRunIsNotSent: a request the runner read while stopping and
// answered not run is not sent (routed again); the caller closes its side
// of the draining stream, and its next call goes on a new stream.
func TestStreamNotRunIsNotSent(t *testing.T) {
	testenv.CheckLeaks(t)
	d := &drainingServer{closedBy: make(chan error, 1)}
	addr := serveGRPC(t, d)
	c := newTestClient(t)
	owner := routing.Owner{RunnerID: "b", Addr: addr, Epoch: 5}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, res, err := c.attemptRemote(ctx, &call{kind: kindCall, typ: "echo", id: "e1", body: []byte("x")}, owner)
	if res != notSent || !errors.Is(err, ErrNotSent) || !errors.Is(err, errNotRun) {
		t.Fatalf("call answered not run: %v, %v; want not sent", res, err)
	}
	if err := <-d.closedBy; !errors.Is(err, io.EOF) {
		t.Fatalf("the draining stream ended with %v, want the caller's close (EOF)", err)
	}
	got, res, err := c.attemptRemote(ctx, &call{kind: kindCall, typ: "echo", id: "e1", body: []byte("y")}, owner)
	if err != nil || string(got) != "y" {
		t.Fatalf("call after the drain: %q, %v, %v", got, res, err)
	}
	if n := d.streams.Load(); n != 2 {
		t.Fatalf("%d streams, want 2", n)
	}
}

// serveCounting serves an echo that counts its deliveries.
func serveCounting(t *testing.T) (addr string, delivered *atomic.Int64) {
	delivered = new(atomic.Int64)
	addr = serveGRPC(t, newTestServer(t, deliverFunc(func(_ context.Context, d entity.Delivery) ([]byte, error) {
		delivered.Add(1)
		return d.Body, nil
	})))
	return addr, delivered
}

// gatedClient is a test client whose sockets write only once g opens.
func gatedClient(t *testing.T) (*Client, *gate) {
	c := newTestClient(t)
	g := &gate{open: make(chan struct{})}
	c.pool.wrap = g.wrap
	return c, g
}
