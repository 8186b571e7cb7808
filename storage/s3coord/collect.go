package s3coord

import (
	"context"
	"errors"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Collection of runner records, done by the membership poller.
const (
	// recordRetention is how long a tombstone is kept, and how long a
	// lapsed lease's record stays before it is tombstoned: long enough
	// that every watcher polling at its maximum interval has seen the
	// lease end with its tombstone's revision.
	recordRetention = time.Minute
	// collectPerPoll bounds the writes one poll spends on collection.
	collectPerPoll = 16
)

// staleRecord is a runner record past its retention, as read.
type staleRecord struct {
	key  string
	etag string
	rec  runnerRecord
}

// collectRecords tombstones lapsed leases and deletes old tombstones, each
// conditional on the version read. Deleting a tombstone is harmless even
// where a conditional delete races a conditional write (VersityGW): no
// renewal holds a tombstone's ETag, and a lock bound to a lease whose
// record is gone is as free as one whose record is a tombstone. Failures
// are left for a later poll.
func (s *Store) collectRecords(ctx context.Context, stale []staleRecord) {
	for i, r := range stale {
		if i >= collectPerPoll || ctx.Err() != nil {
			return
		}
		var err error
		if r.rec.Tombstone {
			cctx, cancel := s.withTimeout(ctx)
			err = s.objects.DeleteIfMatch(cctx, r.key, r.etag)
			cancel()
		} else {
			err = s.tombstone(ctx, "tombstone lapsed lease", r.key, r.rec, r.etag)
		}
		if err != nil && !errors.Is(err, storage.ErrPrecondition) {
			s.opts.logger.Debug("s3coord: collecting a runner record failed; a later poll retries", "key", r.key, "err", err)
			return
		}
	}
}
