package etcd

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/storage"
)

// Keys relative to the store prefix.
const (
	metaKey       = "meta"
	configKey     = "config"
	runnersPrefix = "runners/"
	shardsPrefix  = "shards/"
	wakePrefix    = "wake/"
)

func wakeKey(s storage.ShardID) string {
	return wakePrefix + s.Group + "/" + strconv.Itoa(s.Index)
}

// validName matches runner ids and group names: safe as one key segment.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func runnerKey(id string) string { return runnersPrefix + id }

func shardKey(s storage.ShardID) string {
	return shardsPrefix + s.Group + "/" + strconv.Itoa(s.Index)
}

// parseShardKey parses "shards/<group>/<index>" (relative key).
func parseShardKey(rel string) (storage.ShardID, error) {
	rest, ok := strings.CutPrefix(rel, shardsPrefix)
	if !ok {
		return storage.ShardID{}, fmt.Errorf("not a shard key")
	}
	group, idx, ok := strings.Cut(rest, "/")
	if !ok || !validName.MatchString(group) {
		return storage.ShardID{}, fmt.Errorf("want shards/<group>/<index>")
	}
	n, err := strconv.Atoi(idx)
	if err != nil || n < 0 || strconv.Itoa(n) != idx {
		return storage.ShardID{}, fmt.Errorf("shard index %q is not a non-negative integer", idx)
	}
	return storage.ShardID{Group: group, Index: n}, nil
}

func validateShard(s storage.ShardID) error {
	if !validName.MatchString(s.Group) {
		return fmt.Errorf("%w: shard group %q must match %s", storage.ErrInvalid, s.Group, validName)
	}
	if s.Index < 0 {
		return fmt.Errorf("%w: shard index %d is negative", storage.ErrInvalid, s.Index)
	}
	return nil
}
