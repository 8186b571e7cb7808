package schedule

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// DriverType is the built-in task type that drives schedules: one delayed
// task per tick, entity = the schedule's name, so that the owner of the
// schedule's shard runs it and failover, takeover and fencing are the task
// protocol's.
const DriverType = "tenure:schedule"

// ShardOf returns the shard of group that holds schedule name: the shard
// of its driver entity, so the schedule object and its driver tasks have
// one owner.
func ShardOf(group string, shards int, name string) storage.ShardID {
	return task.ShardOf(group, shards, DriverType, name, "")
}

// Key returns the object key of schedule name in shard:
// "schedules/<group>/<index>/<name>.json".
func Key(shard storage.ShardID, name string) string {
	return GroupPrefix(shard.Group) + strconv.Itoa(shard.Index) + "/" + name + ".json"
}

// GroupPrefix returns the key prefix of all the schedules of group.
func GroupPrefix(group string) string { return "schedules/" + group + "/" }

// TaskID returns the id of the task schedule name (of generation gen)
// fires for tick: a pure function of the three, so that a tick fired twice
// (a failover, a driver run again after a crash) submits the same id and
// task.Client.Submit returns the existing task instead of a second one.
// It reads "cron-<name>-<gen>-<unix seconds>" when that fits in
// task.MaxNameLength, else "cron_<sha256(name), 32 hex>-<gen>-<unix>"
// (the other prefix keeps the two forms apart).
func TaskID(name string, gen int64, tick time.Time) string { return deriveID("cron", name, gen, tick) }

// DriverID returns the id of the driver task of schedule name (generation
// gen) for tick, derived as TaskID is, with prefix "sched". Ids are
// unique within a shard only, and many schedules share a shard: the name
// is part of it.
func DriverID(name string, gen int64, tick time.Time) string {
	return deriveID("sched", name, gen, tick)
}

func deriveID(prefix, name string, gen int64, tick time.Time) string {
	suffix := "-" + strconv.FormatInt(gen, 10) + "-" + strconv.FormatInt(tick.Unix(), 10)
	if id := prefix + "-" + name + suffix; len(id) <= task.MaxNameLength {
		return id
	}
	sum := sha256.Sum256([]byte(name))
	return prefix + "_" + hex.EncodeToString(sum[:16]) + suffix
}
