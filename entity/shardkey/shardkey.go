package shardkey

import (
	"github.com/cespare/xxhash/v2"

	"github.com/tenurehq/tenure/storage"
)

// Of returns the shard of group that holds a task, or the entity it
// names. The function is part of the storage format, so it never changes:
//
//   - an entity (typ, entity): xxhash64(typ + "\x00" + entity) mod shards,
//     so every task and call of one entity lands on the shard whose owner
//     hosts it;
//   - a task without an entity: xxhash64(id) mod shards.
//
// xxhash64 is XXH64 with seed 0 (github.com/cespare/xxhash/v2). shards < 1
// is treated as 1.
func Of(group string, shards int, typ, entity, id string) storage.ShardID {
	if shards < 1 {
		shards = 1
	}
	var h uint64
	if entity != "" {
		h = entityHash(typ, entity)
	} else {
		h = xxhash.Sum64String(id)
	}
	return storage.ShardID{Group: group, Index: int(h % uint64(shards))}
}

// Entity returns the 16 lowercase hex digits of
// xxhash64(typ + "\x00" + entity), or "" when entity is empty. It names the
// entity in keys (ready pointers, mailboxes) without putting its
// (arbitrary UTF-8) id there.
func Entity(typ, entity string) string {
	if entity == "" {
		return ""
	}
	// By hand, not with fmt: it is on every call's path.
	const digits = "0123456789abcdef"
	var b [16]byte
	h := entityHash(typ, entity)
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = digits[h&0xf]
		h >>= 4
	}
	return string(b[:])
}

func entityHash(typ, entity string) uint64 {
	var d xxhash.Digest // on the stack: this runs for every call
	d.Reset()
	d.WriteString(typ)
	d.Write([]byte{0})
	d.WriteString(entity)
	return d.Sum64()
}
