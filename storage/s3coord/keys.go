package s3coord

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/storage"
)

// Keys relative to the object store's prefix (see doc.go for the bodies).
const (
	metaKey       = "meta"
	configKey     = "config"
	runnersPrefix = "runners/"
	shardsPrefix  = "shards/"
	wakePrefix    = "wake/"
)

// validName matches runner ids and group names: safe as one key segment.
// It is etcd's adapter's rule, so that a cluster can move between backends.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func runnerKey(id string) string { return runnersPrefix + id }

func shardKey(s storage.ShardID) string {
	return shardsPrefix + s.Group + "/" + strconv.Itoa(s.Index)
}

// wakeShardPrefix is the prefix of every wake object of shard s.
func wakeShardPrefix(s storage.ShardID) string {
	return wakePrefix + s.Group + "/" + strconv.Itoa(s.Index) + "/"
}

// wakeKey names one wake-up: its revision, zero-padded so that keys sort in
// revision order, and a nonce so that two wake-ups never share a key.
func wakeKey(s storage.ShardID, rev int64, nonce uint32) string {
	return fmt.Sprintf("%s%020d-%08x", wakeShardPrefix(s), rev, nonce)
}

// parseWakeKey parses "wake/<group>/<index>/<rev>-<nonce>".
func parseWakeKey(rel string) (storage.ShardID, int64, bool) {
	rest, ok := strings.CutPrefix(rel, wakePrefix)
	if !ok {
		return storage.ShardID{}, 0, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return storage.ShardID{}, 0, false
	}
	sh, err := parseShardKey(shardsPrefix + parts[0] + "/" + parts[1])
	if err != nil {
		return storage.ShardID{}, 0, false
	}
	revText, _, ok := strings.Cut(parts[2], "-")
	if !ok {
		return storage.ShardID{}, 0, false
	}
	rev, err := strconv.ParseInt(revText, 10, 64)
	if err != nil || rev <= 0 {
		return storage.ShardID{}, 0, false
	}
	return sh, rev, true
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
