package s3coord

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// memberState is runners/ and shards/ as one read judged them: the live
// registrations and the locks bound to them.
type memberState struct {
	st  storage.ServerTime // read before the listing
	rev int64              // the read's revision

	runners map[string]runnerView // live registrations and undecodable records, by key
	locks   map[string]lockView   // held locks of live leases and undecodable records, by key

	// ended gives, for a runner id whose record is a tombstone, the
	// tombstone's revision: its lease's deletes carry it.
	ended map[string]int64
	// freed gives a free lock's revision, by key.
	freed map[string]int64

	// stale are runner records past their retention: tombstones to
	// delete, lapsed leases to tombstone (collect.go).
	stale []staleRecord
}

type runnerView struct {
	rec  runnerRecord
	rev  int64
	info storage.RunnerInfo
	err  error
}

type lockView struct {
	lock storage.ShardLock
	rev  int64
	err  error
}

func (v runnerView) same(o runnerView) bool {
	return (v.err == nil) == (o.err == nil) && reflect.DeepEqual(v.info, o.info)
}

func (v lockView) same(o lockView) bool {
	return (v.err == nil) == (o.err == nil) && v.lock.LeaseID == o.lock.LeaseID && v.lock.Epoch == o.lock.Epoch &&
		v.lock.RunnerID == o.lock.RunnerID && v.lock.AcquiredAt.Equal(o.lock.AcquiredAt)
}

// sameAs reports whether o shows the same membership as m: renewals, which
// only move a lease's expiry, change nothing.
func (m *memberState) sameAs(o *memberState) bool {
	if len(m.runners) != len(o.runners) || len(m.locks) != len(o.locks) {
		return false
	}
	for k, v := range m.runners {
		if w, ok := o.runners[k]; !ok || !v.same(w) {
			return false
		}
	}
	for k, v := range m.locks {
		if w, ok := o.locks[k]; !ok || !v.same(w) {
			return false
		}
	}
	return true
}

// due returns how long until the first live lease may lapse, so that the
// poller looks again then instead of up to a whole interval later.
func (m *memberState) due() time.Duration {
	var d time.Duration
	for _, v := range m.runners {
		if v.err != nil {
			continue
		}
		left := v.rec.Expires.Sub(m.st.Earliest()) + time.Millisecond
		if d == 0 || left < d {
			d = max(left, time.Millisecond)
		}
	}
	return d
}

// readMembers reads the membership for the poller, and collects the stale
// runner records it found.
func (s *Store) readMembers(ctx context.Context) (*memberState, error) {
	m, err := s.readMembership(ctx, true)
	if err == nil {
		s.collectRecords(ctx, m.stale)
	}
	return m, err
}

// readMembership reads runners/ (and shards/ when withLocks) and judges
// them at the store's time read first: a lease is lapsed only if it had
// certainly expired before the listing began.

func (s *Store) readMembership(ctx context.Context, withLocks bool) (*memberState, error) {
	st, err := s.serverTime(ctx)
	if err != nil {
		return nil, s.opError("list membership", runnersPrefix, err)
	}
	// The two prefixes are read at once: a poll's latency is one listing's.
	var runners, locks []entry
	var lockErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if withLocks {
			locks, lockErr = s.readPrefix(ctx, shardsPrefix)
		}
	}()
	runners, err = s.readPrefix(ctx, runnersPrefix)
	<-done
	if err != nil {
		return nil, err
	}
	if lockErr != nil {
		return nil, lockErr
	}
	m := &memberState{st: st, runners: map[string]runnerView{}, locks: map[string]lockView{}, ended: map[string]int64{}, freed: map[string]int64{}}
	maxRev := st.Now.UnixMicro()
	live := map[string]int64{} // runner id → live lease
	bound := map[int64]bool{}  // leases that locks name
	for _, e := range runners {
		rec, err := decodeRunner(e.key, e.body)
		if err != nil {
			m.runners[e.key] = runnerView{err: s.corrupt(e.key, err)}
			continue
		}
		maxRev = max(maxRev, rec.Rev)
		id := e.key[len(runnersPrefix):]
		switch {
		case rec.Tombstone:
			m.ended[id] = rec.Rev
			// A fence stays until its lease has certainly stopped, and a
			// retention beyond: deleted sooner, the next taker would find
			// no record and fence the lease anew, restarting the wait.
			if rec.Rev < st.Earliest().Add(-recordRetention).UnixMicro() &&
				(!rec.Fence || st.Earliest().Add(-recordRetention).After(rec.Expires)) {
				m.stale = append(m.stale, staleRecord{key: e.key, etag: e.etag, rec: rec})
			}
		case rec.lapsed(st):
			if st.Earliest().Add(-recordRetention).After(rec.Expires) {
				m.stale = append(m.stale, staleRecord{key: e.key, etag: e.etag, rec: rec})
			}
		default:
			m.runners[e.key] = runnerView{rec: rec, rev: rec.Rev, info: *rec.Runner}
			live[id] = rec.Lease
		}
	}
	for _, e := range locks {
		shard, err := parseShardKey(e.key)
		if err != nil {
			m.locks[e.key] = lockView{err: s.corrupt(e.key, err)}
			continue
		}
		l, err := decodeLock(e.body)
		if err != nil {
			m.locks[e.key] = lockView{lock: storage.ShardLock{Shard: shard}, err: s.corrupt(e.key, err)}
			continue
		}
		maxRev = max(maxRev, l.Rev)
		if !l.free() {
			bound[l.Lease] = true
		}
		switch {
		case l.free():
			m.freed[e.key] = l.Rev
		case live[l.RunnerID] == l.Lease:
			m.locks[e.key] = lockView{rev: l.Rev, lock: storage.ShardLock{
				Shard: shard, RunnerID: l.RunnerID, AcquiredAt: l.AcquiredAt, LeaseID: l.Lease, Epoch: l.Epoch,
			}}
		}
	}
	// A tombstone whose lease a lock still names is kept: without it, a
	// taker of that lock would find no record and could not tell a lease
	// that ended from one whose record was deleted behind its back (it
	// would fence the lease and wait out its TTL). Only a read with the
	// locks collects.
	if withLocks {
		m.stale = slices.DeleteFunc(m.stale, func(r staleRecord) bool { return r.rec.Tombstone && bound[r.rec.Lease] })
	} else {
		m.stale = nil
	}
	m.rev = s.observeRev(maxRev)
	return m, nil
}

// Runners lists live runners with the revision of the read. Undecodable
// records are left out and reported together in the error (wrapping
// storage.ErrCorrupt) alongside the decodable ones.
func (s *Store) Runners(ctx context.Context) ([]storage.RunnerInfo, int64, error) {
	m, err := s.readMembership(ctx, false)
	if err != nil {
		return nil, 0, s.opError("list runners", runnersPrefix, err)
	}
	out, err := decoded(m.runners, func(v runnerView) (storage.RunnerInfo, error) { return v.info, v.err })
	return out, m.rev, err
}

// ShardLocks lists held shard locks with the revision of the read: locks
// whose lease has ended or lapsed are not held. Undecodable records are
// handled as Runners does.
func (s *Store) ShardLocks(ctx context.Context) ([]storage.ShardLock, int64, error) {
	m, err := s.readMembership(ctx, true)
	if err != nil {
		return nil, 0, s.opError("list shard locks", shardsPrefix, err)
	}
	out, err := decoded(m.locks, func(v lockView) (storage.ShardLock, error) { return v.lock, v.err })
	return out, m.rev, err
}

// decoded returns, in key order, the value of every view that decoded,
// and the errors of those that did not, joined: Runners and ShardLocks
// report undecodable records beside the decodable ones, not instead of
// them.
func decoded[V, T any](views map[string]V, value func(V) (T, error)) ([]T, error) {
	var out []T
	var errs []error
	for _, k := range sortedKeys(views) {
		v, err := value(views[k])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, v)
	}
	return out, errors.Join(errs...)
}

// Membership lists runners/ and shards/ as a listing batch, judged at one
// moment of the store's clock.
func (s *Store) Membership(ctx context.Context) (storage.MembershipBatch, error) {
	m, err := s.readMembership(ctx, true)
	if err != nil {
		return storage.MembershipBatch{}, s.opError("list membership", runnersPrefix+" "+shardsPrefix, err)
	}
	b := listing(nil, m, false)
	var errs []error
	for _, ev := range b.Events {
		if err := eventErr(ev); err != nil {
			errs = append(errs, err)
		}
	}
	return b, errors.Join(errs...)
}

func eventErr(ev storage.MembershipEvent) error {
	if ev.Runner != nil {
		return ev.Runner.Err
	}
	return ev.Lock.Err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func runnerPut(key string, v runnerView, rev int64, resync bool) storage.MembershipEvent {
	ev := storage.RunnerEvent{Kind: storage.EventPut, ID: key[len(runnersPrefix):], Runner: v.info, Revision: rev, Resync: resync, Err: v.err}
	return storage.MembershipEvent{Runner: &ev}
}

func lockPut(v lockView, rev int64, resync bool) storage.MembershipEvent {
	ev := storage.LockEvent{Kind: storage.EventPut, Shard: v.lock.Shard, Lock: v.lock, Revision: rev, Resync: resync, Err: v.err}
	if v.err != nil {
		ev.Lock = storage.ShardLock{}
	}
	return storage.MembershipEvent{Lock: &ev}
}

func runnerDelete(key string, rev int64, resync bool) storage.MembershipEvent {
	ev := storage.RunnerEvent{Kind: storage.EventDelete, ID: key[len(runnersPrefix):], Revision: rev, Resync: resync}
	return storage.MembershipEvent{Runner: &ev}
}

func lockDelete(key string, v lockView, rev int64, resync bool) storage.MembershipEvent {
	shard, _ := parseShardKey(key)
	ev := storage.LockEvent{Kind: storage.EventDelete, Shard: shard, Revision: rev, Resync: resync}
	return storage.MembershipEvent{Lock: &ev}
}

// listing is a listing batch of cur: a put for every live runner and every
// held lock, then, when prev is a view the consumer holds, deletes for what
// it holds and cur does not.
func listing(prev, cur *memberState, resync bool) storage.MembershipBatch {
	b := storage.MembershipBatch{Revision: cur.rev, Listing: true, Resync: resync}
	for _, k := range sortedKeys(cur.runners) {
		v := cur.runners[k]
		b.Events = append(b.Events, runnerPut(k, v, max(v.rev, 1), resync))
	}
	for _, k := range sortedKeys(cur.locks) {
		v := cur.locks[k]
		b.Events = append(b.Events, lockPut(v, max(v.rev, 1), resync))
	}
	if prev == nil {
		return b
	}
	for _, k := range sortedKeys(prev.runners) {
		if _, ok := cur.runners[k]; !ok {
			b.Events = append(b.Events, runnerDelete(k, cur.rev, resync))
		}
	}
	for _, k := range sortedKeys(prev.locks) {
		if _, ok := cur.locks[k]; !ok {
			b.Events = append(b.Events, lockDelete(k, prev.locks[k], cur.rev, resync))
		}
	}
	return b
}

// diff is the batch of changes from prev to cur, in revision order: each
// change carries the revision its write stamped (a tombstone's for the
// deletes of its runner and of the locks bound to its lease, a free
// record's for a release); a change no write explains (a lease that lapsed,
// an object removed) carries the read's. At one revision runner changes
// come first, so that a lock change never precedes the runner change that
// explains it. ok is false when nothing changed.
func diff(prev, cur *memberState, lastRev int64) (storage.MembershipBatch, bool) {
	type ordered struct {
		rev    int64
		runner bool
		ev     storage.MembershipEvent
	}
	var evs []ordered
	for _, k := range sortedKeys(cur.runners) {
		v := cur.runners[k]
		if old, ok := prev.runners[k]; !ok || !v.same(old) {
			rev := orRev(v.rev, cur.rev)
			evs = append(evs, ordered{rev, true, runnerPut(k, v, rev, false)})
		}
	}
	for _, k := range sortedKeys(prev.runners) {
		if _, ok := cur.runners[k]; !ok {
			rev := cur.rev
			if r, ok := cur.ended[k[len(runnersPrefix):]]; ok {
				rev = r
			}
			evs = append(evs, ordered{rev, true, runnerDelete(k, rev, false)})
		}
	}
	for _, k := range sortedKeys(cur.locks) {
		v := cur.locks[k]
		if old, ok := prev.locks[k]; !ok || !v.same(old) {
			rev := orRev(v.rev, cur.rev)
			evs = append(evs, ordered{rev, false, lockPut(v, rev, false)})
		}
	}
	for _, k := range sortedKeys(prev.locks) {
		if _, ok := cur.locks[k]; !ok {
			old := prev.locks[k]
			rev := cur.rev
			if r, ok := cur.freed[k]; ok {
				rev = r
			} else if r, ok := cur.ended[old.lock.RunnerID]; ok && old.err == nil {
				rev = r
			}
			evs = append(evs, ordered{rev, false, lockDelete(k, old, rev, false)})
		}
	}
	if len(evs) == 0 {
		return storage.MembershipBatch{}, false
	}
	slices.SortStableFunc(evs, func(a, b ordered) int {
		if a.rev != b.rev {
			return compareInt(a.rev, b.rev)
		}
		return compareInt(boolInt(!a.runner), boolInt(!b.runner))
	})
	// A change whose write carries a revision at or below one the
	// consumer has seen (writes of one AcquireShards land in any order,
	// writers' clocks differ) is reported just above it: the stream's
	// revisions never go back.
	b := storage.MembershipBatch{Revision: lastRev + 1}
	for _, e := range evs {
		rev := max(e.rev, lastRev+1)
		if e.ev.Runner != nil {
			e.ev.Runner.Revision = rev
		} else {
			e.ev.Lock.Revision = rev
		}
		b.Revision = max(b.Revision, rev)
		b.Events = append(b.Events, e.ev)
	}
	return b, true
}

// orRev returns rev, or fallback when rev is unknown (an undecodable record).
func orRev(rev, fallback int64) int64 {
	if rev == 0 {
		return fallback
	}
	return rev
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// WatchMembership streams runners/ and shards/ as one stream of batches
// (see storage.MembershipBatch), polled by the store's membership poller: a
// listing first, then the changes of each poll as one batch; a lease that
// lapses or ends takes its runner and its locks out in one batch. A failed
// poll is announced by a batch marked Interrupted, and the next successful
// one is a listing marked Resync.
func (s *Store) WatchMembership(ctx context.Context) <-chan storage.MembershipBatch {
	out := make(chan storage.MembershipBatch, 16)
	var prev *memberState
	var lastRev int64
	s.members.subscribe(ctx, func() { close(out) }, func(ctx context.Context, u update[*memberState]) bool {
		var b storage.MembershipBatch
		switch {
		case u.interrupted:
			b = storage.MembershipBatch{Revision: lastRev, Interrupted: true}
		case u.first || u.resync:
			b = listing(prev, u.state, u.resync)
			b.Revision = max(b.Revision, lastRev)
			prev = u.state
		default:
			var ok bool
			b, ok = diff(prev, u.state, lastRev)
			prev = u.state
			if !ok {
				return true
			}
		}
		lastRev = b.Revision
		return send(ctx, out, b)
	})
	return out
}

// WatchShardLocks streams changes to shards/, starting with a put for every
// held lock: the lock events of the membership stream (a listing after an
// interruption gives puts and deletes marked Resync).
func (s *Store) WatchShardLocks(ctx context.Context) <-chan storage.LockEvent {
	out := make(chan storage.LockEvent, 64)
	var prev *memberState
	var lastRev int64
	s.members.subscribe(ctx, func() { close(out) }, func(ctx context.Context, u update[*memberState]) bool {
		var b storage.MembershipBatch
		switch {
		case u.interrupted:
			return true
		case u.first || u.resync:
			b = listing(prev, u.state, u.resync)
			if u.resync {
				// Only the difference: the consumer holds its view.
				d, _ := diff(prev, u.state, lastRev)
				b = d
				for _, ev := range b.Events {
					if ev.Lock != nil {
						ev.Lock.Resync = true
					}
				}
			}
		default:
			b, _ = diff(prev, u.state, lastRev)
		}
		prev = u.state
		lastRev = max(lastRev, b.Revision)
		for _, ev := range b.Events {
			if ev.Lock == nil {
				continue
			}
			if !send(ctx, out, *ev.Lock) {
				return false
			}
		}
		return true
	})
	return out
}
