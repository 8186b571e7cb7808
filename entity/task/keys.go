package task

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/entity/shardkey"
	"github.com/tenurehq/tenure/storage"
)

// Key prefixes, relative to the object store's prefix.
const (
	TasksPrefix = "tasks/" // tasks/<group>/<index>/<id>.json
	ReadyPrefix = "ready/" // ready/<group>/<index>/<due>_<id>[.<ekey>]
	taskSuffix  = ".json"
)

// DueLayout is the time layout of a pointer key's <due> segment: UTC, to the
// millisecond, always DueWidth bytes (years 0001 to 9999), so that keys sort
// in due order.
const (
	DueLayout = "20060102T150405.000Z"
	DueWidth  = len(DueLayout)
)

var (
	minDue = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDue = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)
)

// TaskKey returns "tasks/<group>/<index>/<id>.json".
func TaskKey(shard storage.ShardID, id string) string {
	return TaskPrefix(shard) + id + taskSuffix
}

// TaskPrefix returns "tasks/<group>/<index>/", the prefix of a shard's task
// objects.
func TaskPrefix(shard storage.ShardID) string {
	return TasksPrefix + shard.Group + "/" + strconv.Itoa(shard.Index) + "/"
}

// PointerPrefix returns "ready/<group>/<index>/", the prefix of a shard's
// ready pointers. Listing it returns them in due order.
func PointerPrefix(shard storage.ShardID) string {
	return ReadyPrefix + shard.Group + "/" + strconv.Itoa(shard.Index) + "/"
}

// Ref returns "group/index/id".
func Ref(shard storage.ShardID, id string) string { return shard.String() + "/" + id }

// ParseRef splits a task ref "group/index/id" into its shard and id.
func ParseRef(ref string) (storage.ShardID, string, error) {
	parts := strings.Split(ref, "/")
	if len(parts) != 3 {
		return storage.ShardID{}, "", &KeyError{"task ref", ref, "want group/index/id"}
	}
	shard, err := shardOf(parts[0], parts[1])
	if err != nil {
		return storage.ShardID{}, "", &KeyError{"task ref", ref, err.Error()}
	}
	if err := ValidateID(parts[2]); err != nil {
		return storage.ShardID{}, "", &KeyError{"task ref", ref, err.Error()}
	}
	return shard, parts[2], nil
}

// ParseTaskKey splits a task key "tasks/<group>/<index>/<id>.json" into its
// shard and id.
func ParseTaskKey(key string) (storage.ShardID, string, error) {
	rest, ok := strings.CutPrefix(key, TasksPrefix)
	if !ok {
		return storage.ShardID{}, "", &KeyError{"task key", key, "want prefix " + TasksPrefix}
	}
	rest, ok = strings.CutSuffix(rest, taskSuffix)
	if !ok {
		return storage.ShardID{}, "", &KeyError{"task key", key, "want suffix " + taskSuffix}
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return storage.ShardID{}, "", &KeyError{"task key", key, "want tasks/<group>/<index>/<id>.json"}
	}
	shard, err := shardOf(parts[0], parts[1])
	if err == nil {
		err = ValidateID(parts[2])
	}
	if err != nil {
		return storage.ShardID{}, "", &KeyError{"task key", key, err.Error()}
	}
	return shard, parts[2], nil
}

// FormatDue formats t as a pointer's <due> segment: UTC, rounded up to the
// millisecond so a pointer never reads due before its task is, and clamped
// to years 0001–9999 to keep the width fixed.
func FormatDue(t time.Time) string {
	t = ceilMilli(t)
	if t.Before(minDue) {
		t = minDue
	}
	if t.After(maxDue) {
		t = maxDue
	}
	return t.Format(DueLayout)
}

// ParseDue parses a <due> segment written by FormatDue.
func ParseDue(s string) (time.Time, error) {
	if len(s) != DueWidth {
		return time.Time{}, fmt.Errorf("due %q is %d bytes, want %d (%s)", s, len(s), DueWidth, DueLayout)
	}
	t, err := time.Parse(DueLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("due %q: %v", s, err)
	}
	return t, nil
}

// PointerKey returns the ready pointer key of a task with these fields:
// "ready/<group>/<index>/<due>_<id>", followed by ".<ekey>" (EntityKey) when
// entity is not empty. The due time is fixed-width, so a shard's pointers
// list in due order. They sit side by side under one prefix, not in a
// sub-prefix per due time: S3 does not care, but file-backed S3 servers
// (VersityGW's POSIX backend) make a directory of every prefix and remove it
// when it empties, and a directory per millisecond would be created and
// removed under concurrent writers for every task.
func PointerKey(shard storage.ShardID, availableAt time.Time, id, typ, entity string) string {
	k := PointerPrefix(shard) + FormatDue(availableAt) + "_" + id
	if entity != "" {
		k += "." + EntityKey(typ, entity)
	}
	return k
}

// PointerKey returns the task's ready pointer key: a pure function of its
// shard, available_at, id, type and entity, so that any process can find
// (and delete) the pointer of a task it has read.
func (t *Task) PointerKey() string {
	return PointerKey(t.Shard, t.AvailableAt, t.ID, t.Type, t.Entity)
}

// Pointer is a parsed ready pointer key.
type Pointer struct {
	Key   string // the whole key
	Shard storage.ShardID
	Due   time.Time // the task's available_at, to the millisecond
	ID    string
	// EntityKey is the task's EntityKey, empty for an entity-less task:
	// it lets an executor serialise an entity's tasks before reading them.
	EntityKey string
	// Written is when the pointer was last written, in S3 time, as a
	// listing reported it (the object's LastModified); zero when the
	// pointer did not come from a listing (a wake-up, a parsed key). It
	// tells how long a pointer has been there whoever looked at it
	// before: an executor's own memory starts with its ownership.
	Written time.Time
}

// Ref returns the pointed-to task's ref.
func (p Pointer) Ref() string { return Ref(p.Shard, p.ID) }

// TaskKey returns the pointed-to task's key.
func (p Pointer) TaskKey() string { return TaskKey(p.Shard, p.ID) }

// ParsePointer parses a ready pointer key; a malformed one gives a
// *KeyError naming it.
func ParsePointer(key string) (Pointer, error) {
	bad := func(reason string) (Pointer, error) {
		return Pointer{}, &KeyError{"pointer key", key, reason}
	}
	rest, ok := strings.CutPrefix(key, ReadyPrefix)
	if !ok {
		return bad("want prefix " + ReadyPrefix)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || len(parts[2]) < DueWidth+2 || parts[2][DueWidth] != '_' {
		return bad("want ready/<group>/<index>/<due>_<id>[.<entity-key>]")
	}
	shard, err := shardOf(parts[0], parts[1])
	if err != nil {
		return bad(err.Error())
	}
	due, err := ParseDue(parts[2][:DueWidth])
	if err != nil {
		return bad(err.Error())
	}
	id, ekey, hasEkey := strings.Cut(parts[2][DueWidth+1:], ".")
	if err := ValidateID(id); err != nil {
		return bad(err.Error())
	}
	if hasEkey && !isEntityKey(ekey) {
		return bad(fmt.Sprintf("entity key %q is not 16 lowercase hex digits", ekey))
	}
	return Pointer{Key: key, Shard: shard, Due: due, ID: id, EntityKey: ekey}, nil
}

// EntityKey returns the 16 lowercase hex digits of
// xxhash64(typ + "\x00" + entity), or "" when entity is empty (see
// shardkey.Entity). It names the entity in pointer keys without putting its
// (arbitrary UTF-8) id there.
func EntityKey(typ, entity string) string { return shardkey.Entity(typ, entity) }

func isEntityKey(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ShardOf returns the shard of group that holds a task: by its entity
// when it names one, so that every task of one entity lands on the shard
// whose owner hosts it, else by its id. It is shardkey.Of, part of the
// storage format.
func ShardOf(group string, shards int, typ, entity, id string) storage.ShardID {
	return shardkey.Of(group, shards, typ, entity, id)
}

// parseShard parses "group/index".
func parseShard(s string) (storage.ShardID, error) {
	g, idx, ok := strings.Cut(s, "/")
	if !ok {
		return storage.ShardID{}, fmt.Errorf("want group/index")
	}
	return shardOf(g, idx)
}

func shardOf(group, index string) (storage.ShardID, error) {
	if err := ValidateGroup(group); err != nil {
		return storage.ShardID{}, err
	}
	n, err := strconv.Atoi(index)
	if err != nil || n < 0 || strconv.Itoa(n) != index {
		return storage.ShardID{}, fmt.Errorf("shard index %q is not a non-negative integer in canonical form", index)
	}
	return storage.ShardID{Group: group, Index: n}, nil
}
