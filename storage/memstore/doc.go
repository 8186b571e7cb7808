// Package memstore is an in-memory storage.ObjectStore for unit tests that
// need deterministic clocks and fault injection. It follows S3's semantics:
// ETags are the quoted hex MD5 of the body (so rewriting the same body keeps
// the ETag, as on S3), conditional writes and conditional deletes are atomic, List is lexicographic
// by byte with StartAfter, a page limit and Truncated, deleting a missing key
// succeeds, and bodies are copied in and out. LastModified has S3's
// one-second resolution.
//
// Time comes from an injected clock (WithClock); ServerTime returns it with
// zero uncertainty.
//
// Faults are injected declaratively with Inject, or with a Hook function for
// full control. Either can act before an operation is applied (the operation
// then does not happen: a request that never reached the server) or after it
// (the operation happened but the caller gets an error: a response lost
// after the write), and either can delay the call:
//
//	s := memstore.New()
//	// The next replace of k is applied but its response is lost.
//	s.Inject(memstore.Fault{Op: memstore.OpReplace, Key: "k", When: memstore.AfterApply,
//		Err: storage.ErrUnavailable, Times: 1})
//
// Calls and CallCounts count the operations made, for request-cost tests.
package memstore
