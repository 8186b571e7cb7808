package s3coord

import (
	"fmt"
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
var validName = storage.ValidName

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

func parseShardKey(rel string) (storage.ShardID, error) { return storage.ParseShardKey(rel) }

func validateShard(s storage.ShardID) error { return storage.ValidateShard(s) }
