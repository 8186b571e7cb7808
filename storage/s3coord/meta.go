package s3coord

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/tenurehq/tenure/storage"
)

// EnsureMeta writes m as the cluster meta if none exists (stamping
// CreatedAt when zero) and returns the stored record; a stored record that
// disagrees yields a *storage.MetaMismatchError.
func (s *Store) EnsureMeta(ctx context.Context, m storage.ClusterMeta) (storage.ClusterMeta, error) {
	if err := validateMeta(m); err != nil {
		return storage.ClusterMeta{}, s.opError("ensure meta", metaKey, err)
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = s.opts.now().UTC()
	}
	val, err := json.Marshal(m)
	if err != nil {
		return storage.ClusterMeta{}, s.opError("ensure meta", metaKey, err)
	}
	_, err = s.create(ctx, "ensure meta", metaKey, val)
	if err == nil {
		return m, nil
	}
	if !errors.Is(err, storage.ErrPrecondition) {
		return storage.ClusterMeta{}, err
	}
	stored, err := s.Meta(ctx)
	if err != nil {
		return storage.ClusterMeta{}, err
	}
	if err := stored.Compare(m); err != nil {
		return stored, s.opError("ensure meta", metaKey, err)
	}
	return stored, nil
}

// Meta returns the stored cluster meta, or storage.ErrNotFound.
func (s *Store) Meta(ctx context.Context) (storage.ClusterMeta, error) {
	obj, err := s.get(ctx, metaKey)
	if err != nil {
		return storage.ClusterMeta{}, err
	}
	var m storage.ClusterMeta
	if err := json.Unmarshal(obj.Body, &m); err != nil {
		return storage.ClusterMeta{}, s.corrupt(metaKey, err)
	}
	if err := validateMeta(m); err != nil {
		return storage.ClusterMeta{}, s.corrupt(metaKey, err)
	}
	return m, nil
}
