package s3coord

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// LeaseTimeToLive finds the runner record bound to leaseID (one listing,
// served from the store's cache for records that did not change) and
// returns its TTL and expires − the earliest reading of the store's clock:
// an upper bound of the time left, since the clock was read before the
// record. A lease with no live record (tombstoned, lapsed, never granted)
// is storage.ErrNotFound.
func (s *Store) LeaseTimeToLive(ctx context.Context, leaseID int64) (storage.LeaseTime, error) {
	key := "lease " + strconv.FormatInt(leaseID, 16)
	m, err := s.readMembership(ctx, false)
	if err != nil {
		return storage.LeaseTime{}, s.opError("lease time-to-live", key, err)
	}
	for _, v := range m.runners {
		if v.err != nil || v.rec.Lease != leaseID {
			continue
		}
		return storage.LeaseTime{
			Granted:   v.rec.ttl(),
			Remaining: max(v.rec.Expires.Sub(m.st.Earliest()), time.Millisecond),
		}, nil
	}
	return storage.LeaseTime{}, s.opError("lease time-to-live", key, fmt.Errorf("%w: no live runner record holds the lease (lapsed, revoked or never granted)", storage.ErrNotFound))
}
