package state

import (
	"encoding/base64"
	"strconv"

	"github.com/tenurehq/tenure/storage"
)

// Prefix is the key prefix of every state object, relative to the object
// store's prefix.
const Prefix = "state/"

const suffix = ".json"

// ShardPrefix returns "state/<group>/<index>/", the prefix of a shard's
// state objects: listing it finds every entity of the shard with state.
func ShardPrefix(shard storage.ShardID) string {
	return Prefix + shard.Group + "/" + strconv.Itoa(shard.Index) + "/"
}

// Key returns "state/<group>/<index>/<type>/<base64url(id)>.json". The id
// is encoded (URL alphabet, no padding) because entity ids are any UTF-8:
// a slash or a dot in an id must not change the key's shape, and distinct
// ids must give distinct keys.
func Key(shard storage.ShardID, typ, id string) string {
	return ShardPrefix(shard) + typ + "/" + base64.RawURLEncoding.EncodeToString([]byte(id)) + suffix
}
