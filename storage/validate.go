package storage

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Validation shared by the RunnerStore adapters (storage/etcd,
// storage/s3coord), so that both accept the same names and a cluster can
// move between backends.

// ValidName matches runner ids and group names: safe as one key segment.
var ValidName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ParseShardKey parses "shards/<group>/<index>" (a key relative to a
// RunnerStore's prefix).
func ParseShardKey(rel string) (ShardID, error) {
	rest, ok := strings.CutPrefix(rel, "shards/")
	if !ok {
		return ShardID{}, fmt.Errorf("not a shard key")
	}
	group, idx, ok := strings.Cut(rest, "/")
	if !ok || !ValidName.MatchString(group) {
		return ShardID{}, fmt.Errorf("want shards/<group>/<index>")
	}
	n, err := strconv.Atoi(idx)
	if err != nil || n < 0 || strconv.Itoa(n) != idx {
		return ShardID{}, fmt.Errorf("shard index %q is not a non-negative integer", idx)
	}
	return ShardID{Group: group, Index: n}, nil
}

// ValidateShard checks a shard id before any I/O: ErrInvalid otherwise.
func ValidateShard(s ShardID) error {
	if !ValidName.MatchString(s.Group) {
		return fmt.Errorf("%w: shard group %q must match %s", ErrInvalid, s.Group, ValidName)
	}
	if s.Index < 0 {
		return fmt.Errorf("%w: shard index %d is negative", ErrInvalid, s.Index)
	}
	return nil
}

// ValidateRunner checks a runner record before any I/O: ErrInvalid otherwise.
func ValidateRunner(r RunnerInfo) error {
	if !ValidName.MatchString(r.ID) {
		return fmt.Errorf("%w: runner id %q must match %s", ErrInvalid, r.ID, ValidName)
	}
	if math.IsNaN(r.Weight) || math.IsInf(r.Weight, 0) || r.Weight < 0 {
		return fmt.Errorf("%w: runner %s weight %v must be a finite number ≥ 0", ErrInvalid, r.ID, r.Weight)
	}
	for _, g := range r.Groups {
		if !ValidName.MatchString(g) {
			return fmt.Errorf("%w: runner %s group %q must match %s", ErrInvalid, r.ID, g, ValidName)
		}
	}
	return nil
}

// ValidateMeta checks a cluster meta before any I/O: ErrInvalid otherwise.
func ValidateMeta(m ClusterMeta) error {
	switch {
	case m.Shards < 1:
		return fmt.Errorf("%w: cluster meta shards %d must be at least 1", ErrInvalid, m.Shards)
	case len(m.Groups) == 0:
		return fmt.Errorf("%w: cluster meta needs at least one group", ErrInvalid)
	case m.Hash == "":
		return fmt.Errorf("%w: cluster meta hash must be named", ErrInvalid)
	case !slices.IsSorted(m.Groups) || len(slices.Compact(slices.Clone(m.Groups))) != len(m.Groups):
		return fmt.Errorf("%w: cluster meta groups %q must be sorted and unique", ErrInvalid, m.Groups)
	}
	for _, g := range m.Groups {
		if !ValidName.MatchString(g) {
			return fmt.Errorf("%w: cluster meta group %q must match %s", ErrInvalid, g, ValidName)
		}
	}
	return nil
}
