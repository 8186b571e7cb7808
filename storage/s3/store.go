package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/servertime"
)

// Store is a storage.ObjectStore on one bucket (and optional key prefix) of
// an S3 endpoint. It is safe for concurrent use.
type Store struct {
	client   *awss3.Client
	bucket   string
	endpoint string // endpoint and bucket, for errors
	opts     options
	clock    *servertime.Estimator
	// callOpt installs the Date-recording middleware on each call.
	callOpt func(*awss3.Options)
	// refreshing admits one ServerTime refresh request at a time.
	refreshing chan struct{}
}

var _ storage.ObjectStore = (*Store)(nil)

// New returns a Store on bucket through client. It makes no request; call
// Check to verify the bucket and credentials.
func New(client *awss3.Client, bucket string, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, &ConfigError{"client", "nil *s3.Client"}
	}
	if bucket == "" {
		return nil, &ConfigError{"bucket", "required"}
	}
	if strings.ContainsAny(bucket, "/ \t\r\n") {
		return nil, &ConfigError{"bucket", fmt.Sprintf("%q is not a bucket name", bucket)}
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &Store{
		client:     client,
		bucket:     bucket,
		endpoint:   endpointOf(client.Options(), bucket),
		opts:       o,
		clock:      servertime.New(servertime.WithResolution(o.dateResolution)),
		refreshing: make(chan struct{}, 1),
	}
	s.callOpt = recordDates(s.clock)
	return s, nil
}

// endpointOf names where bucket lives, for error messages.
func endpointOf(o awss3.Options, bucket string) string {
	base := aws.ToString(o.BaseEndpoint)
	if base == "" {
		base = "https://s3." + o.Region + ".amazonaws.com"
	}
	return strings.TrimSuffix(base, "/") + "/" + bucket
}

// Bucket returns the bucket name.
func (s *Store) Bucket() string { return s.bucket }

// Region returns the region the store's requests are signed for: the
// client's, which NewClient resolves (see ClientConfig.Region).
func (s *Store) Region() string { return s.client.Options().Region }

// Prefix returns the key prefix inside the bucket.
func (s *Store) Prefix() string { return s.opts.prefix }

// Create implements storage.ObjectStore with PutObject If-None-Match: *.
func (s *Store) Create(ctx context.Context, key string, body []byte) (string, error) {
	return s.put(ctx, opCreate, key, body, func(in *awss3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
}

// Replace implements storage.ObjectStore with PutObject If-Match. An empty
// ifMatch, or "*", is refused with storage.ErrInvalid: either would turn the
// compare-and-swap into something weaker.
func (s *Store) Replace(ctx context.Context, key string, body []byte, ifMatch string) (string, error) {
	if ifMatch == "" || ifMatch == "*" {
		full, _ := s.fullKey(key)
		return "", s.opErr(opReplace, full, fmt.Errorf("%w: If-Match ETag %q", storage.ErrInvalid, ifMatch))
	}
	return s.put(ctx, opReplace, key, body, func(in *awss3.PutObjectInput) { in.IfMatch = aws.String(ifMatch) })
}

// Put implements storage.ObjectStore with an unconditional PutObject.
func (s *Store) Put(ctx context.Context, key string, body []byte) (string, error) {
	return s.put(ctx, opPut, key, body, nil)
}

func (s *Store) put(ctx context.Context, op, key string, body []byte, cond func(*awss3.PutObjectInput)) (string, error) {
	full, err := s.fullKey(key)
	if err != nil {
		return "", s.opErr(op, full, err)
	}
	var etag string
	err = s.do(ctx, op, full, func(ctx context.Context) error {
		in := &awss3.PutObjectInput{
			Bucket:        aws.String(s.bucket),
			Key:           aws.String(full),
			Body:          bytes.NewReader(body),
			ContentLength: aws.Int64(int64(len(body))),
		}
		if cond != nil {
			cond(in)
		}
		out, err := s.client.PutObject(ctx, in, s.callOpt)
		if err != nil {
			return err
		}
		etag = aws.ToString(out.ETag)
		if etag == "" {
			return fmt.Errorf("%w: the response carried no ETag", storage.ErrCorrupt)
		}
		return nil
	})
	return etag, err
}

// Get implements storage.ObjectStore. Bodies larger than the store's maximum
// object size give storage.ErrTooLarge.
func (s *Store) Get(ctx context.Context, key string) (storage.Object, error) {
	full, err := s.fullKey(key)
	if err != nil {
		return storage.Object{}, s.opErr(opGet, full, err)
	}
	var obj storage.Object
	err = s.do(ctx, opGet, full, func(ctx context.Context) error {
		out, err := s.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)}, s.callOpt)
		if err != nil {
			return err
		}
		defer out.Body.Close()
		max := s.opts.maxObjectSize
		if n := aws.ToInt64(out.ContentLength); n > max {
			return fmt.Errorf("%w: %d bytes, the limit is %d", storage.ErrTooLarge, n, max)
		}
		body, err := io.ReadAll(io.LimitReader(out.Body, max+1))
		if err != nil {
			return fmt.Errorf("reading the body: %w", err)
		}
		if int64(len(body)) > max {
			return fmt.Errorf("%w: more than %d bytes", storage.ErrTooLarge, max)
		}
		obj = storage.Object{
			ObjectInfo: storage.ObjectInfo{
				Key:          key,
				ETag:         aws.ToString(out.ETag),
				Size:         int64(len(body)),
				LastModified: aws.ToTime(out.LastModified),
			},
			Body: body,
		}
		return nil
	})
	return obj, err
}

// Head implements storage.ObjectStore with HeadObject.
func (s *Store) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	full, err := s.fullKey(key)
	if err != nil {
		return storage.ObjectInfo{}, s.opErr(opHead, full, err)
	}
	var info storage.ObjectInfo
	err = s.do(ctx, opHead, full, func(ctx context.Context) error {
		out, err := s.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)}, s.callOpt)
		if err != nil {
			return err
		}
		info = storage.ObjectInfo{
			Key:          key,
			ETag:         aws.ToString(out.ETag),
			Size:         aws.ToInt64(out.ContentLength),
			LastModified: aws.ToTime(out.LastModified),
		}
		return nil
	})
	return info, err
}

// Delete implements storage.ObjectStore with DeleteObject. A missing key is
// not an error (S3 answers 204; servers that answer 404 are forgiven).
func (s *Store) Delete(ctx context.Context, key string) error {
	full, err := s.fullKey(key)
	if err != nil {
		return s.opErr(opDelete, full, err)
	}
	err = s.do(ctx, opDelete, full, func(ctx context.Context) error {
		_, err := s.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)}, s.callOpt)
		return err
	})
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	return err
}

// DeleteIfMatch implements storage.ObjectStore with DeleteObject If-Match.
// A 412 is storage.ErrPrecondition; a missing key is not an error (S3
// answers 404 to If-Match on a missing key, VersityGW 204). An empty
// ifMatch, or "*", is refused with storage.ErrInvalid: it would make the
// delete unconditional.
func (s *Store) DeleteIfMatch(ctx context.Context, key, ifMatch string) error {
	full, err := s.fullKey(key)
	if err != nil {
		return s.opErr(opDelete, full, err)
	}
	if ifMatch == "" || ifMatch == "*" {
		return s.opErr(opDelete, full, fmt.Errorf("%w: If-Match ETag %q", storage.ErrInvalid, ifMatch))
	}
	err = s.do(ctx, opDelete, full, func(ctx context.Context) error {
		_, err := s.client.DeleteObject(ctx, &awss3.DeleteObjectInput{
			Bucket:  aws.String(s.bucket),
			Key:     aws.String(full),
			IfMatch: aws.String(ifMatch),
		}, s.callOpt)
		return err
	})
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	return err
}

// List implements storage.ObjectStore with one ListObjectsV2 call.
func (s *Store) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListPage, error) {
	full := s.opts.prefix + prefix
	if err := checkKeyChars(prefix); err != nil {
		return storage.ListPage{}, s.opErr(opList, full, fmt.Errorf("%w: prefix %q: %v", storage.ErrInvalid, prefix, err))
	}
	if err := checkKeyChars(opts.StartAfter); err != nil {
		return storage.ListPage{}, s.opErr(opList, full, fmt.Errorf("%w: StartAfter %q: %v", storage.ErrInvalid, opts.StartAfter, err))
	}
	if opts.Limit < 0 {
		return storage.ListPage{}, s.opErr(opList, full, fmt.Errorf("%w: negative Limit %d", storage.ErrInvalid, opts.Limit))
	}
	limit := opts.Limit
	if limit == 0 || limit > storage.MaxListLimit {
		limit = storage.MaxListLimit
	}
	var page storage.ListPage
	err := s.do(ctx, opList, full, func(ctx context.Context) error {
		in := &awss3.ListObjectsV2Input{
			Bucket:  aws.String(s.bucket),
			Prefix:  aws.String(full),
			MaxKeys: aws.Int32(int32(limit)),
		}
		if opts.StartAfter != "" {
			in.StartAfter = aws.String(s.opts.prefix + opts.StartAfter)
		}
		out, err := s.client.ListObjectsV2(ctx, in, s.callOpt)
		if err != nil {
			return err
		}
		page.Objects = make([]storage.ObjectInfo, 0, len(out.Contents))
		for _, o := range out.Contents {
			k := aws.ToString(o.Key)
			rel, ok := strings.CutPrefix(k, s.opts.prefix)
			if !ok || !strings.HasPrefix(k, full) {
				return fmt.Errorf("%w: listing of %q returned key %q", storage.ErrCorrupt, full, k)
			}
			page.Objects = append(page.Objects, storage.ObjectInfo{
				Key:          rel,
				ETag:         aws.ToString(o.ETag),
				Size:         aws.ToInt64(o.Size),
				LastModified: aws.ToTime(o.LastModified),
			})
		}
		page.Truncated = aws.ToBool(out.IsTruncated)
		return nil
	})
	return page, err
}

// Check verifies that the bucket exists and the credentials may list it,
// with one ListObjectsV2 of at most one key under the prefix. Unlike
// HeadBucket, whose error responses have no body, its errors name the cause,
// so a missing bucket (storage.ErrNoBucket), rejected credentials
// (storage.ErrAccessDenied) and an unreachable endpoint
// (storage.ErrUnavailable) are told apart on every server.
func (s *Store) Check(ctx context.Context) error {
	return s.do(ctx, opCheck, s.opts.prefix, func(ctx context.Context) error {
		_, err := s.client.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{
			Bucket:  aws.String(s.bucket),
			Prefix:  aws.String(s.opts.prefix),
			MaxKeys: aws.Int32(1),
		}, s.callOpt)
		return err
	})
}

// do runs one request under the request timeout, maps its error and reports
// it to the observer. Errors fn returns that already carry a storage
// sentinel are kept as they are.
func (s *Store) do(ctx context.Context, op, key string, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return s.opErr(op, key, ctxErr(err))
	}
	call, cancel := context.WithTimeout(ctx, s.opts.requestTimeout)
	defer cancel()
	start := time.Now()
	err := fn(call)
	for try := 1; try <= directoryRaceRetries && isDirectoryRace(err) && call.Err() == nil; try++ {
		// VersityGW's POSIX backend removes a prefix's directory when its
		// last object goes and can answer a concurrent write into it with
		// 409 ExistingObjectIsDirectory; the write was not applied, so
		// trying again is safe.
		select {
		case <-call.Done():
		case <-time.After(time.Duration(try) * 5 * time.Millisecond):
		}
		err = fn(call)
	}
	d := time.Since(start)
	if err != nil {
		if !hasSentinel(err) {
			err = classify(ctx, call, op, err)
		}
		err = s.opErr(op, key, err)
	}
	if s.opts.observer != nil {
		s.opts.observer(op, err, d)
	}
	return err
}

// directoryRaceRetries bounds the retries of a write that lost a race with
// a file-backed server's directory clean-up.
const directoryRaceRetries = 3

func isDirectoryRace(err error) bool {
	var api smithy.APIError
	return err != nil && errors.As(err, &api) && api.ErrorCode() == "ExistingObjectIsDirectory"
}

func (s *Store) opErr(op, key string, err error) error {
	return &storage.OpError{Backend: "s3", Op: op, Key: key, Endpoint: s.endpoint, Err: err}
}

// ctxErr maps a context error seen before any request: a deadline that has
// passed means the backend cannot answer in time; a cancellation is the
// caller's.
func ctxErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return storage.Wrap(storage.ErrUnavailable, err)
	}
	return err
}

func hasSentinel(err error) bool {
	for _, k := range []error{storage.ErrTooLarge, storage.ErrCorrupt, storage.ErrUnavailable, storage.ErrInvalid} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}
