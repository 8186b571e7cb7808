package etcd

import (
	"context"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/storage"
)

// LeaseTimeToLive asks etcd how long the lease has left. etcd answers in
// whole seconds rounded down, and -1 for a lease it does not know (the
// gRPC layer turns its not-found error into that), so Remaining is the
// count plus one second and a missing lease is storage.ErrNotFound.
func (s *Store) LeaseTimeToLive(ctx context.Context, leaseID int64) (storage.LeaseTime, error) {
	opErr := func(err error) error {
		return &storage.OpError{Backend: "etcd", Op: "lease time-to-live", Key: "lease " + strconv.FormatInt(leaseID, 16),
			Endpoint: s.endpoint(), Err: classify(ctx, s.opts.requestTimeout, err)}
	}
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	resp, err := s.cli.TimeToLive(cctx, clientv3.LeaseID(leaseID))
	if leaseGone(err) || (err == nil && resp.TTL < 0) {
		return storage.LeaseTime{}, opErr(fmt.Errorf("%w: no such lease (expired or revoked)", storage.ErrNotFound))
	}
	if err != nil {
		return storage.LeaseTime{}, opErr(err)
	}
	return storage.LeaseTime{
		Granted:   time.Duration(resp.GrantedTTL) * time.Second,
		Remaining: time.Duration(resp.TTL+1) * time.Second,
	}, nil
}
