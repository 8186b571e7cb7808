package etcd

import (
	"strconv"

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
var validName = storage.ValidName

func runnerKey(id string) string { return runnersPrefix + id }

func shardKey(s storage.ShardID) string {
	return shardsPrefix + s.Group + "/" + strconv.Itoa(s.Index)
}

func parseShardKey(rel string) (storage.ShardID, error) { return storage.ParseShardKey(rel) }

func validateShard(s storage.ShardID) error { return storage.ValidateShard(s) }
