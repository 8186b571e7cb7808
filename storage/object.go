package storage

import (
	"context"
	"iter"
	"time"
)

// MaxListLimit is the largest page an object store returns from one List
// call; S3's own cap.
const MaxListLimit = 1000

// ObjectInfo describes a stored object without its body.
type ObjectInfo struct {
	Key          string    // relative to the store's prefix
	ETag         string    // opaque entity tag; pass it back verbatim to Replace
	Size         int64     // body length in bytes
	LastModified time.Time // as reported by the store
}

// Object is an object's body and metadata.
type Object struct {
	ObjectInfo
	Body []byte
}

// ListOptions select a page of a listing.
type ListOptions struct {
	// StartAfter lists only keys strictly greater than this one (relative to
	// the store's prefix). Pass the last key of a page to get the next page.
	StartAfter string
	// Limit caps the page size; 0 or anything above MaxListLimit means
	// MaxListLimit.
	Limit int
}

// ListPage is one page of a listing in ascending key order.
type ListPage struct {
	Objects []ObjectInfo
	// Truncated reports that more keys follow the last one in Objects.
	Truncated bool
}

// ServerTime is the object store's clock as estimated from its responses:
// Now is the best estimate and the true server time lies within
// Now ± Uncertainty.
type ServerTime struct {
	Now         time.Time
	Uncertainty time.Duration
}

// Earliest is the earliest the server's clock can read now. Use it to decide
// that a deadline has certainly passed (Earliest().After(deadline)).
func (t ServerTime) Earliest() time.Time { return t.Now.Add(-t.Uncertainty) }

// Latest is the latest the server's clock can read now.
func (t ServerTime) Latest() time.Time { return t.Now.Add(t.Uncertainty) }

// ObjectStore is the object-store port: a flat key space with conditional
// writes and an authoritative clock. Keys are relative to the store's
// configured prefix. Implementations are safe for concurrent use, and every
// call is bounded by the adapter's request timeout.
type ObjectStore interface {
	// Create writes body at key only if no object exists there
	// (If-None-Match: *). It returns the new ETag, or ErrPrecondition when
	// the key exists.
	Create(ctx context.Context, key string, body []byte) (etag string, err error)
	// Replace writes body at key only if the stored object's ETag is ifMatch.
	// It returns the new ETag, or ErrPrecondition when the object changed or
	// no longer exists (servers differ between 404 and 412 there; both are
	// reported as ErrPrecondition so callers re-read to learn which). An
	// empty or "*" ifMatch is refused with ErrInvalid.
	//
	// ETags identify bodies (S3 uses their MD5), so rewriting an identical
	// body keeps the ETag: callers that rely on Replace to detect a change
	// must make every write's body differ (a timestamp or version does). A
	// conditional write retried after its response was lost may report
	// ErrPrecondition although the first attempt was applied; re-reading
	// resolves that as any lost race.
	Replace(ctx context.Context, key string, body []byte, ifMatch string) (etag string, err error)
	// Put writes body at key unconditionally.
	Put(ctx context.Context, key string, body []byte) (etag string, err error)
	// Get returns the object's body and metadata, or ErrNotFound.
	Get(ctx context.Context, key string) (Object, error)
	// Head returns the object's metadata, or ErrNotFound.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// Delete removes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// DeleteIfMatch removes key only if the stored object's ETag is ifMatch
	// (S3's conditional DeleteObject, If-Match): ErrPrecondition when it is
	// another version. A missing key is not an error: the version the caller
	// read is gone either way (S3 answers 404 there, VersityGW 204). An empty
	// or "*" ifMatch is refused with ErrInvalid.
	//
	// How atomic the check is belongs to the server. On Amazon S3 (general
	// purpose buckets accept conditional deletes since September 2025) and
	// memstore, checking and removing are one step: of a DeleteIfMatch and a
	// Replace holding the same ETag, exactly one succeeds. VersityGW v1.8.0's
	// POSIX backend checks If-Match and then unlinks the file without the
	// per-object lock its conditional PUTs hold, so a Replace published in
	// between is removed with it. Callers that must not lose such a write
	// need a second line of defence (entity/task's purge documents its own).
	DeleteIfMatch(ctx context.Context, key, ifMatch string) error
	// List returns one page of the keys that start with prefix, in ascending
	// order.
	List(ctx context.Context, prefix string, opts ListOptions) (ListPage, error)
	// ServerTime returns the store's clock. Adapters refresh the estimate from
	// the Date header of ordinary responses and make a request of their own
	// only when the estimate is missing or stale.
	ServerTime(ctx context.Context) (ServerTime, error)
}

// Walk iterates over every key under prefix that sorts after startAfter,
// fetching pages of up to pageSize keys (0 means MaxListLimit) as it goes.
// Iteration stops at the first error, which is yielded with a zero
// ObjectInfo.
func Walk(ctx context.Context, s ObjectStore, prefix, startAfter string, pageSize int) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		after := startAfter
		for {
			page, err := s.List(ctx, prefix, ListOptions{StartAfter: after, Limit: pageSize})
			if err != nil {
				yield(ObjectInfo{}, err)
				return
			}
			for _, o := range page.Objects {
				if !yield(o, nil) {
					return
				}
			}
			if !page.Truncated || len(page.Objects) == 0 {
				return
			}
			after = page.Objects[len(page.Objects)-1].Key
		}
	}
}
