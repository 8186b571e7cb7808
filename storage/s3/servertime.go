package s3

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/servertime"
)

// recordDates returns a per-call option that adds dateRecorder to the
// call's middleware stack. Per call rather than on the client so that any
// caller-supplied client gets it, and no client is modified.
func recordDates(est *servertime.Estimator) func(*awss3.Options) {
	add := func(stack *middleware.Stack) error {
		return stack.Deserialize.Add(dateRecorder{est}, middleware.After)
	}
	return func(o *awss3.Options) { o.APIOptions = append(o.APIOptions, add) }
}

// dateRecorder feeds the Date header of every HTTP response, error responses
// included, to the estimator with the instants around the attempt. Added
// last to the deserialize step it sits next to the transport, inside the
// retry loop (finalize step): it times each attempt, not the whole call.
// awsmiddleware.GetServerTime has the Date but not these instants.
type dateRecorder struct{ est *servertime.Estimator }

func (dateRecorder) ID() string { return "TenureServerTime" }

func (m dateRecorder) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	out middleware.DeserializeOutput, md middleware.Metadata, err error,
) {
	sent := time.Now()
	out, md, err = next.HandleDeserialize(ctx, in)
	received := time.Now()
	if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && resp != nil {
		if date, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			m.est.Observe(sent, received, date)
		}
	}
	return out, md, err
}

// ServerTime implements storage.ObjectStore: the estimate kept from the Date
// headers of the store's responses. When there is none yet, or the latest
// sample is older than the time max age, it first makes a HeadBucket of its
// own (one at a time, however many callers wait). Any response to it, even
// an error, carries the server's Date and so refreshes the estimate; only a
// request that got no response fails.
func (s *Store) ServerTime(ctx context.Context) (storage.ServerTime, error) {
	if err := ctx.Err(); err != nil {
		return storage.ServerTime{}, s.opErr(opServerTime, "", ctxErr(err))
	}
	if st, ok := s.freshTime(s.opts.timeMaxAge); ok {
		return st, nil
	}
	select {
	case s.refreshing <- struct{}{}:
		defer func() { <-s.refreshing }()
	case <-ctx.Done():
		return storage.ServerTime{}, s.opErr(opServerTime, "", ctxErr(ctx.Err()))
	}
	// Another caller's refresh, or an ordinary request, may have landed
	// while we waited.
	if st, ok := s.freshTime(s.opts.timeMaxAge); ok {
		return st, nil
	}
	start := time.Now()
	err := s.do(ctx, opServerTime, "", func(ctx context.Context) error {
		_, err := s.client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(s.bucket)}, s.callOpt)
		return err
	})
	if st, ok := s.freshTime(time.Since(start)); ok {
		return st, nil
	}
	if err == nil {
		err = s.opErr(opServerTime, "", fmt.Errorf("%w: the response carried no Date header", storage.ErrUnavailable))
	}
	return storage.ServerTime{}, err
}

// freshTime returns the estimate if its latest sample is at most maxAge old.
func (s *Store) freshTime(maxAge time.Duration) (storage.ServerTime, bool) {
	if age, ok := s.clock.Age(); !ok || age > maxAge {
		return storage.ServerTime{}, false
	}
	return s.clock.Now()
}

// ClockStats returns the clock estimator's sample and jump counts.
func (s *Store) ClockStats() servertime.Stats { return s.clock.Stats() }
