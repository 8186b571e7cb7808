package messaging

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/tenurehq/tenure/messaging/internal/callpb"
)

// Stream implements EntityService: many calls on one long-lived stream.
// Each request read runs in a goroutine of its own, exactly as a Call
// does (serve), under the stream's context bounded by the request's
// timeout and cancelled by a cancellation frame (reqCtx); a writer goroutine
// batches the replies ready at once into one frame.
//
// Stop: the stream is told draining; every request read from then on is
// answered not run (ReplyFrame.not_run), never started, so its caller
// sends it again. The stream ends once the caller has closed its side
// and the requests started before have been answered, so that a
// long-lived stream does not hold the graceful stop until its bound.
func (s *Server) Stream(stream callpb.EntityService_StreamServer) error {
	ctx := stream.Context()
	// Headers at once: until they arrive, the caller's grpc keeps a copy
	// of every frame sent, for a transparent retry.
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	ss := &serverStream{s: s, stream: stream, limit: s.cfg.wireLimit(), wake: make(chan struct{}, 1),
		running: map[uint64]*reqCtx{}}
	written := make(chan struct{})
	go func() {
		defer close(written)
		ss.write()
	}()
	stopWatch := context.AfterFunc(s.stopping, ss.drain)
	defer stopWatch()
	var err error
	for {
		f, rerr := stream.Recv()
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				err = rerr
			}
			break
		}
		ss.frame(ctx, f)
	}
	ss.wg.Wait() // the requests read are answered (or their stream broke)
	ss.mu.Lock()
	ss.closing = true
	ss.mu.Unlock()
	ss.signal()
	<-written
	return err
}

// serverStream is one Stream's state on the server.
type serverStream struct {
	s      *Server
	stream callpb.EntityService_StreamServer
	limit  int           // a reply frame's size bound (the wire limit)
	wake   chan struct{} // the writer has something to send
	wg     sync.WaitGroup

	mu       sync.Mutex
	running  map[uint64]*reqCtx    // by seq: the requests started
	replies  []*callpb.StreamReply // not yet handed to Send
	notRun   []uint64
	draining bool // to send: the server is stopping
	closing  bool // every answer is queued: the writer flushes and ends
}

func (ss *serverStream) signal() {
	select {
	case ss.wake <- struct{}{}:
	default:
	}
}

// drain marks the stream stopping: the next frame says so.
func (ss *serverStream) drain() {
	ss.mu.Lock()
	ss.draining = true
	ss.mu.Unlock()
	ss.signal()
}

// frame starts the requests of f and cancels those it names. A request
// read once Stop began is answered not run. The cancellations come after
// the requests: a caller cancels only a request it sent before.
func (ss *serverStream) frame(ctx context.Context, f *callpb.CallFrame) {
	for _, r := range f.Requests {
		if ss.s.stopping.Err() != nil {
			// Counted as refused: not started, the caller routes it again.
			ss.s.metrics.refused.Inc()
			ss.mu.Lock()
			ss.notRun = append(ss.notRun, r.Seq)
			ss.mu.Unlock()
			ss.signal()
			continue
		}
		rctx := newReqCtx(ctx, time.Duration(r.TimeoutMicros)*time.Microsecond)
		ss.mu.Lock()
		ss.running[r.Seq] = rctx
		ss.mu.Unlock()
		ss.wg.Add(1)
		go ss.run(rctx, r)
	}
	for _, seq := range f.Cancels {
		ss.mu.Lock()
		rctx := ss.running[seq]
		ss.mu.Unlock()
		if rctx != nil {
			rctx.cancel()
		}
	}
}

// run serves one request and queues its reply.
func (ss *serverStream) run(ctx *reqCtx, r *callpb.StreamRequest) {
	defer ss.wg.Done()
	var reply *callpb.CallReply
	if r.Request == nil {
		reply = &callpb.CallReply{Outcome: &callpb.CallReply_Failure{Failure: &callpb.Failure{
			Code: callpb.Failure_CODE_BAD_INPUT, Applied: callpb.Failure_APPLIED_NO, Message: "stream request without a call"}}}
	} else {
		reply = ss.s.serve(ctx, r.Request)
	}
	ctx.cancel()
	ss.mu.Lock()
	delete(ss.running, r.Seq)
	ss.replies = append(ss.replies, &callpb.StreamReply{Seq: r.Seq, Reply: reply})
	ss.mu.Unlock()
	ss.signal()
}

// write sends the queued answers, all those ready in one frame (up to the
// size bound), until closing. After a failed Send the stream is broken:
// the reader ends too, and the rest is dropped.
func (ss *serverStream) write() {
	f := &callpb.ReplyFrame{}
	broken := false
	for range ss.wake {
		// Let the requests already runnable finish first: their replies
		// join this frame.
		runtime.Gosched()
		for {
			ss.mu.Lock()
			n, size := 0, 0
			for n < len(ss.replies) {
				sz := replySize(ss.replies[n].Reply)
				if n > 0 && size+sz > ss.limit {
					break
				}
				size += sz
				n++
			}
			f.Replies = append(f.Replies[:0], ss.replies[:n]...)
			rest := copy(ss.replies, ss.replies[n:])
			clear(ss.replies[rest:])
			ss.replies = ss.replies[:rest]
			f.NotRun = append(f.NotRun[:0], ss.notRun...)
			ss.notRun = ss.notRun[:0]
			f.Draining, ss.draining = ss.draining, false
			more, closing := len(ss.replies) > 0, ss.closing
			ss.mu.Unlock()
			if !broken && (len(f.Replies) > 0 || len(f.NotRun) > 0 || f.Draining) {
				if err := ss.stream.Send(f); err != nil {
					broken = true
				}
				clear(f.Replies)
			}
			if more {
				continue
			}
			if closing {
				return
			}
			break
		}
	}
}

// replySize bounds the encoded size of a reply in a frame.
func replySize(r *callpb.CallReply) int {
	const envelope = 64 // seq, tags, lengths, the refusal's numbers
	n := envelope
	switch o := r.GetOutcome().(type) {
	case *callpb.CallReply_Payload:
		n += len(o.Payload)
	case *callpb.CallReply_Refusal:
		n += len(o.Refusal.OwnerRunnerId) + len(o.Refusal.OwnerAddress)
	case *callpb.CallReply_Failure:
		n += len(o.Failure.Message) + len(o.Failure.AppCode) + len(o.Failure.Details)
	}
	return n
}
