package messaging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/tenurehq/tenure/messaging/internal/callpb"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// streamsPerConn is how many Streams a pooled connection carries calls on.
// One writer goroutine per stream marshals every frame: at 16 cores one
// stream became the bottleneck, at 2 a second one only splits the batches.
var streamsPerConn = max(1, min(4, runtime.GOMAXPROCS(0)/4))

// streamOpenTimeout bounds opening a stream (grpc connects first if it has
// to): the calls queued meanwhile fail not sent, and the next call opens
// another.
const streamOpenTimeout = 10 * time.Second

// errStreamClosed is the error of calls queued on a stream whose
// connection the pool closed (idle, or the Client closed).
var errStreamClosed = errors.New("messaging: the connection was closed")

// errNotRun is the error of a call the runner read and did not start
// because it was stopping.
var errNotRun = errors.New("the runner is stopping and did not start it")

// sendState is how a stream call ended.
type sendState int

const (
	stateReplied sendState = iota // the runner answered
	stateNotSent                  // provably never reached the runner, or the runner did not start it
	stateUnknown                  // may have reached the runner; no answer
)

// streamResult is what a stream call's caller is handed.
type streamResult struct {
	state  sendState
	reply  *callpb.CallReply
	err    error
	unsent bool // not written because the socket had stopped writing (errNotWritten)
	// held: the request was handed to the writer and no answer came, so
	// its frame may still be being marshalled: the pending is not reused.
	held bool
}

// pending is one call on a stream, from its queueing to its answer. It is
// touched under its stream's mu only, but by its caller once answered.
type pending struct {
	req    callpb.StreamRequest
	sent   bool   // handed to SendMsg
	before uint64 // the connection's write sequence before that SendMsg
	ch     chan streamResult
}

var pendings = sync.Pool{New: func() any { return &pending{ch: make(chan streamResult, 1)} }}

// callStream is one Stream of a pooled connection. Callers queue their
// requests; its writer goroutine sends every request queued (and every
// cancellation) in one frame per SendMsg — batching comes from the calls
// that arrive while the previous frame is being sent, and from those
// already runnable when it wakes (it yields once first), never from a
// timer — and its reader goroutine hands each reply to its caller by
// sequence number.
type callStream struct {
	pc     *poolConn
	slot   int
	limit  int // a frame's size bound (the wire limit of one message)
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	probe  *sendProbe // the stream's: which socket grpc queued it on

	mu        sync.Mutex
	calls     map[uint64]*pending // every call not answered, queued or sent
	queue     []*pending          // not yet handed to SendMsg
	cancels   []uint64
	seq       uint64
	ended     bool // takes no more calls: failed, closed or draining
	closeSend bool // draining: the writer closes its side once the queue is sent
}

func (s *callStream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// enqueue queues p, numbering it; false if the stream takes no more calls.
func (s *callStream) enqueue(p *pending) bool {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return false
	}
	s.seq++
	p.req.Seq, p.sent = s.seq, false
	s.calls[p.req.Seq] = p
	s.queue = append(s.queue, p)
	s.mu.Unlock()
	s.signal()
	return true
}

// abandon is the end of a call whose caller's context ended before its
// answer: a request still queued is taken back (not sent); one sent is
// cancelled at the runner (unknown). An answer that came meanwhile wins.
func (s *callStream) abandon(p *pending) streamResult {
	s.mu.Lock()
	if _, ok := s.calls[p.req.Seq]; !ok {
		s.mu.Unlock()
		return <-p.ch
	}
	delete(s.calls, p.req.Seq)
	if !p.sent {
		if i := slices.Index(s.queue, p); i >= 0 {
			s.queue = slices.Delete(s.queue, i, i+1)
		}
		s.mu.Unlock()
		return streamResult{state: stateNotSent}
	}
	if !s.ended || s.closeSend {
		// A draining stream still carries cancellations until its
		// writer closes its side: the runner finishes what it started.
		s.cancels = append(s.cancels, p.req.Seq)
	}
	s.mu.Unlock()
	s.signal()
	return streamResult{state: stateUnknown, held: true}
}

// run opens the stream, then writes until it ends; the reader runs beside.
func (s *callStream) run() {
	// A bound on the open only: the stream lives on after it.
	t := time.AfterFunc(streamOpenTimeout, s.cancel)
	st, err := s.pc.client.Stream(context.WithValue(s.ctx, sentKey{}, s.probe), grpc.WaitForReady(false))
	if !t.Stop() && err == nil {
		err = fmt.Errorf("messaging: opening a call stream: not open after %s", streamOpenTimeout)
	}
	if err != nil {
		// No request is written before the stream is open: every call
		// queued is not sent.
		s.fail(err, false)
		return
	}
	go s.read(st)
	s.write(st)
}

// write sends the queued requests and cancellations.
func (s *callStream) write(st grpc.BidiStreamingClient[callpb.CallFrame, callpb.ReplyFrame]) {
	f := &callpb.CallFrame{}
	for {
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			return
		}
		// Let the callers already runnable (woken by the last replies)
		// queue theirs first: they join this frame.
		runtime.Gosched()
		for {
			s.mu.Lock()
			if s.ended && !s.closeSend {
				s.mu.Unlock()
				return
			}
			n, size := 0, 0
			for n < len(s.queue) {
				sz := requestSize(s.queue[n].req.Request)
				if n > 0 && size+sz > s.limit {
					break
				}
				size += sz
				n++
			}
			if n == 0 && len(s.cancels) == 0 {
				closeSend := s.closeSend
				s.closeSend = false // no more cancellations: the side is closed
				s.mu.Unlock()
				if closeSend {
					st.CloseSend()
					return
				}
				break
			}
			// Read before SendMsg can queue a byte of the frame: its
			// bytes are written under higher numbers (sendProbe).
			before := s.pc.writes.Load()
			for _, p := range s.queue[:n] {
				p.sent, p.before = true, before
				f.Requests = append(f.Requests, &p.req)
			}
			// The rest moves to the front: the queue's array is reused.
			rest := copy(s.queue, s.queue[n:])
			clear(s.queue[rest:])
			s.queue = s.queue[:rest]
			f.Cancels = append(f.Cancels[:0], s.cancels...)
			s.cancels = s.cancels[:0]
			s.mu.Unlock()
			err := st.SendMsg(f)
			clear(f.Requests)
			f.Requests = f.Requests[:0]
			if err != nil {
				// io.EOF: the stream ended, and the reader gets its
				// status; any other error leaves it open: end it.
				if !errors.Is(err, io.EOF) {
					s.cancel()
				}
				return
			}
		}
	}
}

// read hands each answer to its caller until the stream ends.
func (s *callStream) read(st grpc.BidiStreamingClient[callpb.CallFrame, callpb.ReplyFrame]) {
	for {
		f, err := st.Recv()
		if err != nil {
			s.fail(err, true)
			return
		}
		s.mu.Lock()
		for _, r := range f.Replies {
			if p, ok := s.calls[r.Seq]; ok {
				delete(s.calls, r.Seq)
				p.ch <- streamResult{state: stateReplied, reply: r.Reply}
			}
		}
		for _, seq := range f.NotRun {
			if p, ok := s.calls[seq]; ok {
				delete(s.calls, seq)
				p.ch <- streamResult{state: stateNotSent, err: errNotRun}
			}
		}
		drain := f.Draining && !s.ended
		if drain {
			// The runner is stopping: what is still queued is not sent
			// (not sent now either), and the writer closes the stream's
			// side once it has sent what it took.
			s.ended, s.closeSend = true, true
			for _, p := range s.queue {
				delete(s.calls, p.req.Seq)
				p.ch <- streamResult{state: stateNotSent, err: errNotRun}
			}
			s.queue = nil
		}
		s.mu.Unlock()
		if drain {
			s.pc.release(s)
			s.signal()
		}
	}
}

// fail ends the stream on err and every call on it not answered: one
// still queued, or sent on a socket that had stopped writing before its
// frame began, is not sent; one on a runner that does not serve Stream is
// not sent either (it read none); any other is unknown.
func (s *callStream) fail(err error, opened bool) {
	unimplemented := opened && status.Code(err) == grpccodes.Unimplemented
	if unimplemented {
		s.pc.unary.Store(true)
	}
	s.mu.Lock()
	s.ended, s.closeSend = true, false
	for seq, p := range s.calls {
		delete(s.calls, seq)
		switch {
		case !p.sent || unimplemented:
			p.ch <- streamResult{state: stateNotSent, err: err, held: p.sent}
		case s.unwrittenAfter(p.before):
			p.ch <- streamResult{state: stateNotSent, err: err, unsent: true, held: true}
		default:
			p.ch <- streamResult{state: stateUnknown, err: err, held: true}
		}
	}
	s.queue, s.cancels = nil, nil
	s.mu.Unlock()
	s.pc.release(s)
	s.cancel()
}

// unwrittenAfter reports whether no write numbered above seq reached the
// stream's socket (trackedConn): the stream was queued once, on a socket
// that has stopped writing since at or before seq. A stream grpc retried
// transparently (queued twice) is not analysed: unknown, conservatively.
func (s *callStream) unwrittenAfter(seq uint64) bool {
	if s.probe.queued.Load() != 1 {
		return false
	}
	c := s.probe.conn.Load()
	return c != nil && c.unwrittenAfter(seq)
}

// requestSize bounds the encoded size of a request in a frame.
func requestSize(r *callpb.CallRequest) int {
	const envelope = 96 // seq, timeout, epoch, tags, lengths
	n := envelope + len(r.Type) + len(r.Id) + len(r.Group) + len(r.Op) + len(r.Payload)
	for k, v := range r.Trace {
		n += len(k) + len(v) + 16
	}
	return n
}

// stream returns a stream of pc to queue a call on, opening one if its
// slot has none that takes calls.
func (pc *poolConn) stream(limit int) (*callStream, error) {
	i := 0
	if n := len(pc.streams); n > 1 {
		i = int(pc.rr.Add(1) % uint32(n))
	}
	if s := pc.streams[i].Load(); s != nil {
		return s, nil
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		return nil, errStreamClosed
	}
	if s := pc.streams[i].Load(); s != nil {
		return s, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &callStream{pc: pc, slot: i, limit: limit, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1),
		probe: &sendProbe{}, calls: map[uint64]*pending{}}
	pc.streams[i].Store(s)
	go s.run()
	return s, nil
}

// release empties s's slot: the next call there opens a new stream.
func (pc *poolConn) release(s *callStream) {
	pc.streams[s.slot].CompareAndSwap(s, nil)
}

// close ends pc's streams (their calls not answered fail as fail says)
// and closes the connection.
func (pc *poolConn) close() {
	pc.mu.Lock()
	pc.closed = true
	for i := range pc.streams {
		if s := pc.streams[i].Load(); s != nil {
			s.cancel()
		}
	}
	pc.mu.Unlock()
	pc.cc.Close()
}
