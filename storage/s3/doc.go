// Package s3 implements storage.ObjectStore on Amazon S3 and S3-compatible
// servers (VersityGW, MinIO, Ceph RGW …) with aws-sdk-go-v2.
//
// Conditional writes carry Tenure's synchronisation: Create is a PutObject
// with If-None-Match: *, Replace a PutObject with If-Match. Lost races (412
// PreconditionFailed, 409 ConditionalRequestConflict, and a 404 or 412 for
// If-Match on a vanished key, depending on the server) all surface as
// storage.ErrPrecondition. DeleteIfMatch is a DeleteObject with If-Match
// (Amazon S3 accepts it on general purpose buckets since September 2025;
// VersityGW v1.8.0 honours it, but not atomically with a concurrent
// conditional PUT: see storage.ObjectStore). Every error is a *storage.OpError naming the
// operation, the full key and the endpoint and bucket, wrapping a storage
// sentinel and the SDK's error.
//
// The store is also Tenure's authoritative clock. A middleware installed on
// every call (per call, so it works on any caller-supplied client) records
// the send and receive instants of each HTTP attempt and its response's Date
// header, error responses included, and feeds them to a
// servertime.Estimator. ServerTime answers from that estimate and makes a
// request of its own only when it is missing or older than the configured
// maximum age.
//
// Every call is bounded by the store's request timeout, on top of any
// deadline of the caller's context. SDK retries (NewClient bounds them)
// happen inside that timeout; note that a retried conditional write whose
// first attempt was applied but whose response was lost reports
// ErrPrecondition, which callers resolve by re-reading, as they must for any
// lost race.
package s3
