package entity

import (
	"sync"

	"github.com/tenurehq/tenure/storage"
)

// doubts records the state objects that a write of this runner may still
// land on: a write in flight, or one whose outcome was unknown (a timeout,
// a lost answer, a request cancelled after it was sent, which S3 may yet
// apply). Such a write carries the owner's epoch and an If-Match on the
// ETag it started from; if the object is activated again under the same
// epoch and only read, the write can land after the read, and the new
// instance's memory lacks it for good. An activation of an object in doubt
// therefore refences it (state.Store.Refence): a conditional write that
// changes the ETag, after which the late write can no longer land.
//
// It lives on the Host, not on an ownership, because the next ownership
// of a shard here may have the same epoch while the ended one's writes
// are still in flight: after a detachment that kept the lock; after a
// lock lost to a polled store's listing that missed it while the lease
// still held it (the runner acquires it again at its epoch); after a
// planned release whose lock delete failed, if the shard is assigned back.
// No end of an ownership proves that its epoch will not return here, so
// doubts are not dropped when one ends.
//
// Invariants: entries are kept per shard for one epoch, the newest seen;
// a key is present while a write of it is in flight (inflight > 0) or its
// last unknown outcome has not been settled by a landed write or a
// refence since (unknown). Doubts of an older epoch are dropped when a
// newer one appears: the newer ownership's first activation writes the
// object anyway (its stored epoch is older), which refuses them all. So
// what is kept is bounded by the keys whose last save under the newest
// epoch seen of each shard ended unknown.
type doubts struct {
	mu     sync.Mutex
	shards map[storage.ShardID]*shardDoubts
}

type shardDoubts struct {
	epoch int64
	keys  map[string]*doubt
}

type doubt struct {
	inflight int
	unknown  bool
}

// writeOutcome is how a state write ended, for doubts.end.
type writeOutcome int

const (
	writeLanded  writeOutcome = iota // it landed: the object has a new ETag
	writeRefused                     // refused before any change (412, too large)
	writeUnknown                     // it may have landed, or may yet
)

// entry returns key's doubt under (shard, epoch), creating it when create
// is set; nil when the epoch is older than the one recorded (its doubts
// are moot) or when absent and not created.
func (d *doubts) entry(shard storage.ShardID, epoch int64, key string, create bool) *doubt {
	sd := d.shards[shard]
	switch {
	case sd != nil && sd.epoch > epoch:
		return nil
	case sd == nil || sd.epoch < epoch:
		if !create {
			return nil
		}
		if d.shards == nil {
			d.shards = map[storage.ShardID]*shardDoubts{}
		}
		sd = &shardDoubts{epoch: epoch, keys: map[string]*doubt{}}
		d.shards[shard] = sd
	}
	dt := sd.keys[key]
	if dt == nil && create {
		dt = &doubt{}
		sd.keys[key] = dt
	}
	return dt
}

// tidy drops key's entry once nothing is in doubt.
func (d *doubts) tidy(shard storage.ShardID, key string, dt *doubt) {
	if dt.inflight > 0 || dt.unknown {
		return
	}
	sd := d.shards[shard]
	delete(sd.keys, key)
	if len(sd.keys) == 0 {
		delete(d.shards, shard)
	}
}

// begin records a write of key under (shard, epoch) about to be sent.
func (d *doubts) begin(shard storage.ShardID, epoch int64, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dt := d.entry(shard, epoch, key, true); dt != nil {
		dt.inflight++
	}
}

// end records how a write that begin recorded ended. A landed write
// settles earlier unknown outcomes: it changed the ETag that any of them
// would need.
func (d *doubts) end(shard storage.ShardID, epoch int64, key string, o writeOutcome) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dt := d.entry(shard, epoch, key, false)
	if dt == nil {
		return // a newer epoch took over: moot
	}
	if dt.inflight > 0 {
		dt.inflight--
	}
	switch o {
	case writeLanded:
		dt.unknown = false
	case writeUnknown:
		dt.unknown = true
	}
	d.tidy(shard, key, dt)
}

// doubted reports whether an activation of key under (shard, epoch) must
// refence it.
func (d *doubts) doubted(shard storage.ShardID, epoch int64, key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	dt := d.entry(shard, epoch, key, false)
	return dt != nil && (dt.inflight > 0 || dt.unknown)
}

// refenced records a refence of key under (shard, epoch) that landed: the
// unknown outcomes before it are settled. Writes still in flight stay in
// doubt, for they may end unknown after it.
func (d *doubts) refenced(shard storage.ShardID, epoch int64, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dt := d.entry(shard, epoch, key, false); dt != nil {
		dt.unknown = false
		d.tidy(shard, key, dt)
	}
}

// len is the number of keys in doubt, for tests.
func (d *doubts) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, sd := range d.shards {
		n += len(sd.keys)
	}
	return n
}
