package etcd

import (
	"encoding/json"
	"fmt"
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

func validateRunner(r storage.RunnerInfo) error { return storage.ValidateRunner(r) }

func validateMeta(m storage.ClusterMeta) error { return storage.ValidateMeta(m) }
