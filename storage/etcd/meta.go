package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/storage"
)

// EnsureMeta writes m as the cluster meta if none exists (stamping
// CreatedAt when zero) and returns the stored record; a stored record that
// disagrees yields a *storage.MetaMismatchError.
func (s *Store) EnsureMeta(ctx context.Context, m storage.ClusterMeta) (storage.ClusterMeta, error) {
	if err := validateMeta(m); err != nil {
		return storage.ClusterMeta{}, s.opError("ensure meta", metaKey, ctx, 0, err)
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = time.Now().UTC()
	}
	val, err := json.Marshal(m)
	if err != nil {
		return storage.ClusterMeta{}, s.opError("ensure meta", metaKey, ctx, 0, err)
	}
	key := s.opts.prefix + metaKey
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return storage.ClusterMeta{}, s.opError("ensure meta", metaKey, ctx, s.opts.requestTimeout, err)
	}
	if resp.Succeeded {
		return m, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 { // deleted between compare and get: cannot happen in one txn
		return storage.ClusterMeta{}, s.opError("ensure meta", metaKey, ctx, 0, errors.New("meta vanished inside a transaction"))
	}
	stored, err := s.decodeMeta(kvs[0].Value)
	if err != nil {
		return storage.ClusterMeta{}, err
	}
	if err := stored.Compare(m); err != nil {
		return stored, s.opError("ensure meta", metaKey, ctx, 0, err)
	}
	return stored, nil
}

// Meta returns the stored cluster meta, or storage.ErrNotFound.
func (s *Store) Meta(ctx context.Context) (storage.ClusterMeta, error) {
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.opts.prefix+metaKey)
	if err != nil {
		return storage.ClusterMeta{}, s.opError("get meta", metaKey, ctx, s.opts.requestTimeout, err)
	}
	if len(resp.Kvs) == 0 {
		return storage.ClusterMeta{}, s.opError("get meta", metaKey, ctx, 0, storage.ErrNotFound)
	}
	return s.decodeMeta(resp.Kvs[0].Value)
}

func (s *Store) decodeMeta(val []byte) (storage.ClusterMeta, error) {
	var m storage.ClusterMeta
	if err := json.Unmarshal(val, &m); err != nil {
		return storage.ClusterMeta{}, s.corrupt(metaKey, err)
	}
	if err := validateMeta(m); err != nil {
		return storage.ClusterMeta{}, s.corrupt(metaKey, err)
	}
	return m, nil
}
