package state

import (
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/storage"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNotFound reports that an entity has no state object.
	ErrNotFound = storage.ErrNotFound
	// ErrFenced is matched by every *FencedError: the caller's ownership
	// no longer owns the object.
	ErrFenced = errors.New("state: fenced: another ownership wrote the state")
	// ErrCorrupt is matched by every *CorruptError.
	ErrCorrupt = errors.New("state: corrupt state object")
	// ErrTooLarge is matched by every *TooLargeError.
	ErrTooLarge = errors.New("state: state too large")
)

// FencedError reports a fence or a save refused because the object was
// written by a newer ownership of the shard, or deleted by an operator,
// since the caller last read it.
type FencedError struct {
	Key    string
	Epoch  int64 // the caller's epoch
	Stored int64 // the stored object's epoch; 0 when Deleted
	// Deleted: the object is gone (tenure entity state delete): the
	// caller's memory no longer matches what is stored.
	Deleted bool
}

// Error names the key and both epochs.
func (e *FencedError) Error() string {
	if e.Deleted {
		return fmt.Sprintf("state: %s: fenced: the object was deleted since epoch %d read it", e.Key, e.Epoch)
	}
	if e.Stored == e.Epoch {
		return fmt.Sprintf("state: %s: fenced: the object changed under epoch %d (another writer of the same ownership)", e.Key, e.Epoch)
	}
	return fmt.Sprintf("state: %s: fenced: stored epoch %d, ours %d", e.Key, e.Stored, e.Epoch)
}

// Is makes errors.Is(err, ErrFenced) hold.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// CorruptError reports a state object that does not decode, or that
// names another entity than its key.
type CorruptError struct {
	Key string
	Err error
}

// Error names the key and the reason.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("state: %s: corrupt state object (inspect with tenure entity state get, repair with delete): %v", e.Key, e.Err)
}

// Unwrap returns the reason.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// TooLargeError reports a state whose encoding exceeds the store's limit;
// nothing was written.
type TooLargeError struct {
	Key   string
	Size  int // encoded state, bytes
	Limit int
}

// Error names the key, the size and the limit.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("state: %s: state is %d bytes encoded, over the limit of %d", e.Key, e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) hold.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }
