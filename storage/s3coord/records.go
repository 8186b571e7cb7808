package s3coord

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// runnerRecord is the body of runners/<id>: a registration and its lease,
// or, once the lease has been revoked or judged lapsed, a tombstone.
type runnerRecord struct {
	Rev       int64               `json:"rev"`
	Runner    *storage.RunnerInfo `json:"runner,omitempty"` // nil in a tombstone
	Lease     int64               `json:"lease"`
	TTLMillis int64               `json:"ttl_ms"`
	// Renewal counts the writes of one lease, so that every write's body
	// (and so its ETag) differs, and a renewal whose answer was lost is
	// recognised on a re-read.
	Renewal   int64     `json:"renewal"`
	Expires   time.Time `json:"expires"` // object-store time
	Tombstone bool      `json:"tombstone,omitempty"`
	// Fence marks a tombstone written by a lock's taker over a record it
	// found absent or undecodable: the lease it names may act until
	// VacantAt plus the lease's TTL (vacancy below), not only until now.
	Fence bool `json:"fence,omitempty"`
	// VacantAt, when set, is a store time by which this key was once seen
	// absent or undecodable: a lease of this id other than the one the
	// record names (or the lease of a fence) may have lost its record
	// then, unannounced, and so may act until VacantAt plus its TTL.
	// Registrations and tombstones carry it forward (vacancy below).
	VacantAt time.Time `json:"vacant_at,omitzero"`
}

func (r runnerRecord) ttl() time.Duration { return time.Duration(r.TTLMillis) * time.Millisecond }

// maxLeaseTTL is the largest lease TTL Register accepts: the bound on the
// TTL of a lease a lock does not name the TTL of (a lock written before
// locks carried it).
const maxLeaseTTL = 24 * time.Hour

// vacancy returns the VacantAt to carry into a record written over r at
// st: r's own, until even a lease of the largest TTL would have ended.
func (r runnerRecord) vacancy(st storage.ServerTime) time.Time {
	if r.VacantAt.IsZero() || st.Earliest().After(r.VacantAt.Add(maxLeaseTTL)) {
		return time.Time{}
	}
	return r.VacantAt
}

// lapsed reports whether the lease has certainly expired at st: the
// earliest the store's clock can read is past expires.
func (r runnerRecord) lapsed(st storage.ServerTime) bool { return st.Earliest().After(r.Expires) }

// live reports whether the record is a registration whose lease has not
// certainly lapsed at st.
func (r runnerRecord) live(st storage.ServerTime) bool { return !r.Tombstone && !r.lapsed(st) }

// lockRecord is the body of shards/<group>/<index>: held (Lease non-zero)
// or free. A released lock stays, free, so that its epoch keeps growing.
type lockRecord struct {
	Rev        int64     `json:"rev"`
	RunnerID   string    `json:"runner_id,omitempty"`
	Lease      int64     `json:"lease,omitempty"`
	AcquiredAt time.Time `json:"acquired_at,omitzero"`
	Epoch      int64     `json:"epoch"`
	// TTLMillis is the holder's lease TTL, so that a taker that finds the
	// holder's record gone can bound how long the holder may still act.
	TTLMillis int64 `json:"ttl_ms,omitempty"`
}

func (l lockRecord) free() bool { return l.Lease == 0 }

// holderTTL returns the TTL of the lease holding l: the one it names, or,
// for a lock written before locks named it, the largest Register accepts.
func (l lockRecord) holderTTL() time.Duration {
	if l.TTLMillis <= 0 {
		return maxLeaseTTL
	}
	return min(time.Duration(l.TTLMillis)*time.Millisecond, maxLeaseTTL)
}

// configRecord is the body of config.
type configRecord struct {
	Rev   int64  `json:"rev"`
	Value []byte `json:"value"`
}

// wakeRecord is the body of a wake object.
type wakeRecord struct {
	Note string `json:"note"`
}

// decodeRunner decodes runners/<id>. The key must match the record's id, so
// that a record copied under another name cannot impersonate a runner.
func decodeRunner(rel string, body []byte) (runnerRecord, error) {
	var r runnerRecord
	if err := json.Unmarshal(body, &r); err != nil {
		return runnerRecord{}, err
	}
	if r.Lease <= 0 || r.Rev <= 0 {
		return runnerRecord{}, fmt.Errorf("lease %d and rev %d must be positive", r.Lease, r.Rev)
	}
	if r.Tombstone {
		r.Runner = nil
		return r, nil
	}
	if r.Runner == nil {
		return runnerRecord{}, fmt.Errorf("neither a registration nor a tombstone")
	}
	if runnerKey(r.Runner.ID) != rel {
		return runnerRecord{}, fmt.Errorf("record id %q does not match its key", r.Runner.ID)
	}
	if err := validateRunner(*r.Runner); err != nil {
		return runnerRecord{}, err
	}
	if r.TTLMillis <= 0 || r.Expires.IsZero() {
		return runnerRecord{}, fmt.Errorf("ttl %dms and expires %v must be set", r.TTLMillis, r.Expires)
	}
	r.Runner.LeaseID = r.Lease
	return r, nil
}

// decodeLock decodes shards/<group>/<index>.
func decodeLock(body []byte) (lockRecord, error) {
	var l lockRecord
	if err := json.Unmarshal(body, &l); err != nil {
		return lockRecord{}, err
	}
	switch {
	case l.Epoch <= 0 || l.Rev <= 0:
		return lockRecord{}, fmt.Errorf("epoch %d and rev %d must be positive", l.Epoch, l.Rev)
	case l.Lease < 0, l.Lease > 0 && !validName.MatchString(l.RunnerID):
		return lockRecord{}, fmt.Errorf("holder %q of lease %d is not a valid runner", l.RunnerID, l.Lease)
	case l.TTLMillis < 0:
		return lockRecord{}, fmt.Errorf("holder TTL %dms must not be negative", l.TTLMillis)
	}
	return l, nil
}

func decodeConfig(body []byte) (configRecord, error) {
	var c configRecord
	if err := json.Unmarshal(body, &c); err != nil {
		return configRecord{}, err
	}
	if c.Rev <= 0 {
		return configRecord{}, fmt.Errorf("rev %d must be positive", c.Rev)
	}
	return c, nil
}

func validateRunner(r storage.RunnerInfo) error { return storage.ValidateRunner(r) }

func validateMeta(m storage.ClusterMeta) error { return storage.ValidateMeta(m) }
