package etcd

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/tenurehq/tenure/storage"
)

// lockRecord is the value of shards/<group>/<shard>.
type lockRecord struct {
	RunnerID   string    `json:"runner_id"`
	AcquiredAt time.Time `json:"acquired_at"`
}

// decodeRunner decodes a runners/ key-value. The key must match the record's
// id, so a record copied under another name cannot impersonate a runner.
func (s *Store) decodeRunner(kv *mvccpb.KeyValue) (storage.RunnerInfo, error) {
	rel := s.rel(kv.Key)
	var r storage.RunnerInfo
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return storage.RunnerInfo{}, s.corrupt(rel, err)
	}
	if runnerKey(r.ID) != rel {
		return storage.RunnerInfo{}, s.corrupt(rel, fmt.Errorf("record id %q does not match its key", r.ID))
	}
	if err := validateRunner(r); err != nil {
		return storage.RunnerInfo{}, s.corrupt(rel, err)
	}
	r.LeaseID = kv.Lease
	return r, nil
}

// decodeLock decodes a shards/ key-value.
func (s *Store) decodeLock(kv *mvccpb.KeyValue) (storage.ShardLock, error) {
	rel := s.rel(kv.Key)
	shard, err := parseShardKey(rel)
	if err != nil {
		return storage.ShardLock{}, s.corrupt(rel, err)
	}
	var rec lockRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return storage.ShardLock{Shard: shard}, s.corrupt(rel, err)
	}
	return storage.ShardLock{
		Shard:      shard,
		RunnerID:   rec.RunnerID,
		AcquiredAt: rec.AcquiredAt,
		LeaseID:    kv.Lease,
		Epoch:      kv.CreateRevision,
	}, nil
}

func (s *Store) rel(key []byte) string { return string(key[min(len(s.opts.prefix), len(key)):]) }

func (s *Store) corrupt(rel string, cause error) error {
	return &storage.OpError{
		Backend:  "etcd",
		Op:       "decode",
		Key:      s.opts.prefix + rel,
		Endpoint: s.endpoint(),
		Err:      storage.Wrap(storage.ErrCorrupt, cause),
	}
}

func validateRunner(r storage.RunnerInfo) error {
	if !validName.MatchString(r.ID) {
		return fmt.Errorf("%w: runner id %q must match %s", storage.ErrInvalid, r.ID, validName)
	}
	if math.IsNaN(r.Weight) || math.IsInf(r.Weight, 0) || r.Weight < 0 {
		return fmt.Errorf("%w: runner %s weight %v must be a finite number ≥ 0", storage.ErrInvalid, r.ID, r.Weight)
	}
	for _, g := range r.Groups {
		if !validName.MatchString(g) {
			return fmt.Errorf("%w: runner %s group %q must match %s", storage.ErrInvalid, r.ID, g, validName)
		}
	}
	return nil
}

func validateMeta(m storage.ClusterMeta) error {
	switch {
	case m.Shards < 1:
		return fmt.Errorf("%w: cluster meta shards %d must be at least 1", storage.ErrInvalid, m.Shards)
	case len(m.Groups) == 0:
		return fmt.Errorf("%w: cluster meta needs at least one group", storage.ErrInvalid)
	case m.Hash == "":
		return fmt.Errorf("%w: cluster meta hash must be named", storage.ErrInvalid)
	case !slices.IsSorted(m.Groups) || len(slices.Compact(slices.Clone(m.Groups))) != len(m.Groups):
		return fmt.Errorf("%w: cluster meta groups %q must be sorted and unique", storage.ErrInvalid, m.Groups)
	}
	for _, g := range m.Groups {
		if !validName.MatchString(g) {
			return fmt.Errorf("%w: cluster meta group %q must match %s", storage.ErrInvalid, g, validName)
		}
	}
	return nil
}
