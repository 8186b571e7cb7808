package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/s3count"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

// Renewal scenario settings.
const (
	// renewalLease is the shortest task lease a runner takes: renewals
	// every second.
	renewalLease = 3 * time.Second
	typeLong     = "bench-long"
	// renewalInputBytes is the long task's input size (a small JSON
	// document): the renewal PUT carries the whole task object.
	renewalInputBytes = 256
)

// RenewalResult holds the figures of renewal: what renewing a long
// task's claim costs on the wire today (a compare-and-swap PUT of the
// whole task object, counted by a proxy in front of the runner), and the
// alternative of seed 002 — a self-CopyObject with replaced metadata,
// guarded by x-amz-copy-source-if-match — tried against the same S3
// server.
type RenewalResult struct {
	LeaseMS    float64 `json:"task_lease_ms"`
	HandlerMS  float64 `json:"handler_ms"`
	InputBytes int     `json:"input_bytes"`
	// Renewals are the compare-and-swap PUTs during the handler beyond
	// the claim and the outcome; the bytes are the mean over every PUT of
	// the task object (claim, renewals, outcome: the same object).
	Renewals         int         `json:"renewals"`
	PutSentBytes     int         `json:"put_sent_bytes"`
	PutBodyBytes     int         `json:"put_body_bytes"`
	PutReceivedBytes int         `json:"put_received_bytes"`
	Copy             CopyRenewal `json:"metadata_only_copy"`
	Decision         string      `json:"decision"`
}

// CopyRenewal is the metadata-only renewal tried on the S3 server.
type CopyRenewal struct {
	// Supported: the copy with the current ETag as
	// x-amz-copy-source-if-match succeeded and replaced the metadata.
	Supported bool `json:"supported"`
	// StaleRefused: the copy with an old ETag was refused with 412.
	StaleRefused bool   `json:"stale_refused"`
	StaleError   string `json:"stale_error,omitempty"`
	// ETagChanged: the copy's ETag differs from the object's before.
	ETagChanged bool   `json:"etag_changed"`
	Error       string `json:"error,omitempty"`
	// Per request, on the wire, of Calls alternating calls each, on an
	// object of the task's size: the full-body PUT (If-Match) and the copy.
	Calls             int     `json:"calls"`
	PutP50MS          float64 `json:"put_p50_ms"`
	CopyP50MS         float64 `json:"copy_p50_ms"`
	CopySentBytes     int     `json:"copy_sent_bytes"`
	CopyReceivedBytes int     `json:"copy_received_bytes"`
	PutSentBytes      int     `json:"put_sent_bytes"`
	PutReceivedBytes  int     `json:"put_received_bytes"`
}

func runRenewal(ctx context.Context, e *env) (Result, error) {
	c, err := e.newCluster(ctx, ScenarioRenewal, taskShards)
	if err != nil {
		return nil, err
	}
	wire, err := c.countingProxy()
	if err != nil {
		return nil, err
	}
	c.overrides = append(c.overrides, "s3.endpoint="+wire.URL(), "entity.task_lease="+renewalLease.String())
	hold := pick(e.o, 4500*time.Millisecond, 2500*time.Millisecond)
	long := func(h *entity.Host) error {
		return h.RegisterFunc(typeLong, func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			select {
			case <-time.After(hold): // the task's work
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return nil, nil
		})
	}
	rs, tc, err := c.runnersAndClient(ctx, 1, long)
	if err != nil {
		return nil, err
	}
	defer stopRunners(rs)
	res := &RenewalResult{LeaseMS: ms(renewalLease), HandlerMS: ms(hold), InputBytes: renewalInputBytes}
	before := wire.Counts()
	input := json.RawMessage(fakeBody(renewalInputBytes))
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, _, err = tc.Submit(sctx, task.SubmitRequest{Type: typeLong, Input: input})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("bench: renewal: submit: %w", err)
	}
	if err := waitCompleted(ctx, rs, tc, nil, typeLong, 1, hold+30*time.Second); err != nil {
		return nil, err
	}
	if err := waitOps(ctx, wire, before, s3count.OpDelete, 1, 10*time.Second); err != nil {
		return nil, err
	}
	d := wire.Counts().Sub(before)
	puts := d.Requests[s3count.OpReplace]
	if puts < 2 {
		return nil, fmt.Errorf("bench: renewal: %d compare-and-swap PUTs on the wire, want the claim and the outcome at least", puts)
	}
	res.Renewals = puts - 2
	res.PutSentBytes, res.PutBodyBytes = d.SentBytes[s3count.OpReplace]/puts, d.BodyBytes[s3count.OpReplace]/puts
	res.PutReceivedBytes = d.ReceivedBytes[s3count.OpReplace] / puts
	e.logf("renewal: %d renewals in %s; a task PUT on the wire: %d bytes sent (%d body), %d received",
		res.Renewals, hold, res.PutSentBytes, res.PutBodyBytes, res.PutReceivedBytes)

	cfg, err := c.config("bench-renewal", "s3.endpoint="+wire.URL())
	if err != nil {
		return nil, err
	}
	client, err := s3store.NewClient(ctx, s3store.ClientConfig{Endpoint: wire.URL(), Region: cfg.S3.Region, UsePathStyle: true,
		AccessKey: cfg.S3.AccessKey, SecretKey: cfg.S3.SecretKey, MaxAttempts: 1})
	if err != nil {
		return nil, fmt.Errorf("bench: renewal: %w", err)
	}
	key := fmt.Sprintf("bench-renewal-%s/task.json", e.runID)
	res.Copy = tryCopyRenewal(ctx, client, wire, cfg.S3.Bucket, key, fakeBody(res.PutBodyBytes), pick(e.o, 50, 10))
	res.Decision = renewalDecision(res.Copy)
	e.logf("renewal: metadata-only copy: %+v", res.Copy)
	return res, nil
}

// tryCopyRenewal tries the self-copy renewal on an object of body and
// times it against the full-body compare-and-swap PUT, calls of each.
func tryCopyRenewal(ctx context.Context, client *awss3.Client, wire *s3count.Proxy, bucket, key string, body []byte, calls int) CopyRenewal {
	var r CopyRenewal
	call := func(f func(context.Context) error) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		t0 := time.Now()
		err := f(cctx)
		return time.Since(t0), err
	}
	put := func(etag string) (string, time.Duration, error) {
		var out *awss3.PutObjectOutput
		d, err := call(func(ctx context.Context) (err error) {
			in := &awss3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytesReader(body), ContentLength: aws.Int64(int64(len(body)))}
			if etag != "" {
				in.IfMatch = &etag
			}
			out, err = client.PutObject(ctx, in)
			return err
		})
		if err != nil {
			return "", d, err
		}
		return aws.ToString(out.ETag), d, nil
	}
	cp := func(etag string, n int) (string, time.Duration, error) {
		var out *awss3.CopyObjectOutput
		d, err := call(func(ctx context.Context) (err error) {
			out, err = client.CopyObject(ctx, &awss3.CopyObjectInput{Bucket: &bucket, Key: &key, CopySource: aws.String(bucket + "/" + key),
				CopySourceIfMatch: &etag, MetadataDirective: types.MetadataDirectiveReplace,
				Metadata: map[string]string{"lease-expires-at": time.Now().Add(time.Duration(n) * time.Second).UTC().Format(time.RFC3339Nano)}})
			return err
		})
		if err != nil {
			return "", d, err
		}
		etag = ""
		if out.CopyObjectResult != nil {
			etag = aws.ToString(out.CopyObjectResult.ETag)
		}
		return etag, d, nil
	}
	etag0, _, err := put("")
	if err != nil {
		r.Error = "creating the object: " + err.Error()
		return r
	}
	etag1, _, err := cp(etag0, 0)
	if err != nil {
		r.Error = "copy onto itself with the current ETag: " + err.Error()
		return r
	}
	head, err := client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		r.Error = "head after the copy: " + err.Error()
		return r
	}
	r.Supported = head.Metadata["lease-expires-at"] != ""
	r.ETagChanged = etag1 != etag0 || aws.ToString(head.ETag) != etag0
	stale := `"00000000000000000000000000000000"`
	if _, _, err := cp(stale, 0); err != nil {
		var ae smithy.APIError
		r.StaleRefused = errors.As(err, &ae) && (ae.ErrorCode() == "PreconditionFailed" || ae.ErrorCode() == "412")
		if !r.StaleRefused {
			r.StaleError = err.Error()
		}
	} else {
		r.StaleError = "a copy with a wrong ETag succeeded"
	}
	if !r.Supported {
		return r
	}
	var putT, copyT []float64
	etag := aws.ToString(head.ETag)
	before := wire.Counts()
	for i := range calls {
		var d time.Duration
		if etag, d, err = put(etag); err != nil {
			r.Error = "full-body PUT: " + err.Error()
			return r
		}
		putT = append(putT, ms(d))
		if etag, d, err = cp(etag, i); err != nil {
			r.Error = "copy: " + err.Error()
			return r
		}
		copyT = append(copyT, ms(d))
	}
	w := wire.Counts().Sub(before)
	r.Calls = calls
	r.PutP50MS, r.CopyP50MS = quantile(putT, 0.5), quantile(copyT, 0.5)
	r.PutSentBytes, r.PutReceivedBytes = w.SentBytes[s3count.OpReplace]/calls, w.ReceivedBytes[s3count.OpReplace]/calls
	r.CopySentBytes, r.CopyReceivedBytes = w.SentBytes[s3count.OpCopy]/calls, w.ReceivedBytes[s3count.OpCopy]/calls
	return r
}

// renewalDecision states which renewal Tenure uses, from what the server
// did.
func renewalDecision(c CopyRenewal) string {
	switch {
	case !c.Supported || !c.StaleRefused:
		return "full-body PUT: this S3 server does not do a conditional metadata-only self-copy"
	case !c.ETagChanged:
		return "full-body PUT: the self-copy keeps the ETag, so a renewal would not fence a compare-and-swap made with the ETag read before it (a takeover's claim would succeed over a renewed lease)"
	}
	return "full-body PUT: the self-copy works here and changes the ETag, but AWS S3 keeps a single-part object's ETag (the MD5 of its content) on a copy, so renewals would not fence there; the bytes saved are the task body only"
}

func (r *RenewalResult) rows() []row {
	c := r.Copy
	copyRow := fmt.Sprintf("supported %t, stale ETag refused %t, ETag changed %t", c.Supported, c.StaleRefused, c.ETagChanged)
	if c.Error != "" {
		copyRow += " (" + c.Error + ")"
	}
	out := []row{
		{"long task", fmt.Sprintf("%d renewals in %gms (lease %gms, input %d bytes)", r.Renewals, r.HandlerMS, r.LeaseMS, r.InputBytes)},
		{"renewal PUT on the wire", fmt.Sprintf("%d bytes sent (%d body), %d received", r.PutSentBytes, r.PutBodyBytes, r.PutReceivedBytes)},
		{"metadata-only self-copy", copyRow},
	}
	if c.Calls > 0 {
		out = append(out, row{"PUT vs copy", fmt.Sprintf("p50 %.2fms vs %.2fms; sent %d vs %d bytes, received %d vs %d (%d calls each)",
			c.PutP50MS, c.CopyP50MS, c.PutSentBytes, c.CopySentBytes, c.PutReceivedBytes, c.CopyReceivedBytes, c.Calls)})
	}
	return append(out, row{"decision", r.Decision})
}

// bytesReader is a seekable reader of b (the SDK signs the body).
func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
