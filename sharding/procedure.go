package sharding

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// ClusterProcedure returns the assignment procedure an existing cluster's
// meta names, and whether the cluster exists (a new one has no meta: its
// first runner records the current procedure). A cluster created by an
// earlier version keeps its procedure while it is upgraded, so that
// runners of both versions compute the same owners: the Manager adopts it
// before comparing the rest of the meta, and a runner checks the meta with
// it. A procedure this version does not know wraps
// placement.ErrUnknownProcedure.
func ClusterProcedure(ctx context.Context, store storage.ClusterMetaStore) (p placement.Procedure, found bool, err error) {
	stored, err := store.Meta(ctx)
	if errors.Is(err, storage.ErrNotFound) {
		return placement.ProcedureV2, false, nil
	}
	if err != nil {
		return placement.ProcedureV2, false, err
	}
	p, err = placement.ProcedureNamed(stored.Hash)
	if err != nil {
		return placement.ProcedureV2, true, fmt.Errorf("cluster meta: %w", err)
	}
	return p, true, nil
}
