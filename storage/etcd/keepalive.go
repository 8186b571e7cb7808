package etcd

import (
	"context"
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keepAliveStream is a session's LeaseKeepAlive stream, opened at the first
// keep-alive and reused while it answers, so that a healthy runner opens
// one stream per lease instead of one per keep-alive.
//
// The lease deadline stays exact: the detachment machine takes it as the
// send time of a keep-alive plus the TTL its answer grants, so an answer
// must be matched to its own request. On one stream etcd answers requests
// in order, one by one (its server reads a request, renews, answers, then
// reads the next); and mu keeps one request outstanding at a time. A call
// that ends without its answer (timeout, cancellation, any error) ends the
// stream with it — an answer arriving later would otherwise be read as the
// next request's — and the next keep-alive opens a fresh one. So every
// answer read is the answer to the request just sent, whose send time the
// caller read before sending.
type keepAliveStream struct {
	mu     sync.Mutex
	stream pb.Lease_LeaseKeepAliveClient // nil: none open
	cancel context.CancelFunc            // ends stream
}

// keepAliveOnce renews the lease once, on the session's stream, opening one
// if none is open. ctx bounds the call, the stream's opening included; the
// stream itself lives with the session (its end, Orphan or Close, ends it)
// and requires a leader: a member that loses its leader ends it with "no
// leader", and refuses to open a new one while it has none.
func (ss *Session) keepAliveOnce(ctx context.Context) (*pb.LeaseKeepAliveResponse, error) {
	k := &ss.ka
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stream == nil {
		sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ss.ctx))
		stop := context.AfterFunc(ctx, cancel)
		stream, err := pb.NewLeaseClient(ss.s.cli.ActiveConnection()).LeaseKeepAlive(sctx)
		if !stop() {
			cancel()
			return nil, fmt.Errorf("open keep-alive stream: %w", context.Cause(ctx))
		}
		if err != nil {
			cancel()
			return nil, rpctypes.Error(err)
		}
		k.stream, k.cancel = stream, cancel
	}
	// The call's end cuts the stream: Recv has no deadline of its own.
	stop := context.AfterFunc(ctx, k.cancel)
	resp, err := k.roundTrip(ss.lease)
	if !stop() {
		k.closeLocked()
		return nil, fmt.Errorf("keep-alive: %w", context.Cause(ctx))
	}
	if err != nil {
		k.closeLocked()
		return nil, err
	}
	return resp, nil
}

// roundTrip sends one keep-alive and reads its answer, under mu. clientv3's
// KeepAliveOnce reports a stream the server has already ended (no leader,
// say) as a bare EOF from Send; the status it ended with is what Recv
// returns, so read that.
func (k *keepAliveStream) roundTrip(lease clientv3.LeaseID) (*pb.LeaseKeepAliveResponse, error) {
	if err := k.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(lease)}); err != nil {
		if _, rerr := k.stream.Recv(); rerr != nil {
			err = rerr
		}
		return nil, rpctypes.Error(err)
	}
	resp, err := k.stream.Recv()
	if err != nil {
		return nil, rpctypes.Error(err)
	}
	if resp.ID != int64(lease) {
		return nil, fmt.Errorf("keep-alive of lease %x answered for lease %x", int64(lease), resp.ID)
	}
	return resp, nil
}

// close ends the stream, if one is open.
func (k *keepAliveStream) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closeLocked()
}

func (k *keepAliveStream) closeLocked() {
	if k.stream == nil {
		return
	}
	k.stream.CloseSend()
	k.cancel()
	k.stream, k.cancel = nil, nil
}
