package runner

import (
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// ClientOption configures a Client (Connect, Runner.Client).
type ClientOption func(*clientOptions)

type clientOptions struct {
	etcd     *clientv3.Client
	rs       storage.RunnerStore
	s3       *awss3.Client
	aws      *aws.Config
	group    string
	defaults task.SubmitDefaults
	logger   *slog.Logger
	registry prometheus.Registerer
	tracer   trace.TracerProvider
}

// connects reports whether o brings connections of its own, which a
// runner's client cannot take: it shares the runner's.
func (o clientOptions) connects() bool {
	return o.etcd != nil || o.rs != nil || o.s3 != nil || o.aws != nil
}

// WithEtcdClient makes Connect use cli instead of dialing the configured
// etcd (etcd.* settings other than request_timeout are then unused).
// Client.Close leaves cli open: it belongs to the caller. Connect refuses
// it for a cluster that coordinates on S3 (coordination: s3).
func WithEtcdClient(cli *clientv3.Client) ClientOption {
	return func(o *clientOptions) { o.etcd = cli }
}

// WithRunnerStore makes Connect use rs as the cluster's coordination store
// instead of opening the one the config names (etcd or S3); it must be on
// the cluster's keys (see OpenRunnerStore). Client.Close leaves rs open: it
// belongs to the caller. It wins over WithEtcdClient.
func WithRunnerStore(rs storage.RunnerStore) ClientOption {
	return func(o *clientOptions) { o.rs = rs }
}

// WithS3Client makes Connect use client, as it is, for the configured
// bucket and prefix instead of building one from the s3.* settings
// (s3.bucket, s3.prefix and s3.request_timeout still apply).
func WithS3Client(client *awss3.Client) ClientOption {
	return func(o *clientOptions) { o.s3 = client }
}

// WithAWSConfig makes Connect build its S3 client from c: its credentials,
// retryer and HTTP client, with s3.endpoint and s3.path_style from the
// config, and s3.region when c has no region; s3.access_key, s3.secret_key
// and s3.session_token are unused. Checksum settings c leaves unset take
// Tenure's (only where S3 requires them: S3-compatible servers mishandle
// the newer defaults). WithS3Client, if also given, wins.
func WithAWSConfig(c aws.Config) ClientOption {
	return func(o *clientOptions) { o.aws = &c }
}

// WithGroup sets the shard group tasks are submitted to; it must be one
// of the cluster's. Default: the first of the config's groups (those a
// runner of this config serves, so that a service alone in its cluster
// runs its own tasks), else "default" when the cluster has it, else the
// cluster's first group.
func WithGroup(group string) ClientOption {
	return func(o *clientOptions) { o.group = group }
}

// WithSubmitDefaults sets what Submit uses for the fields a
// task.SubmitRequest leaves zero (default task.DefaultSubmit()).
func WithSubmitDefaults(d task.SubmitDefaults) ClientOption {
	return func(o *clientOptions) { o.defaults = d }
}

// WithClientLogger sets the logger of the client's best-effort failures
// (wake-ups, stale pointers). Default: the runner's logger for
// Runner.Client; for Connect, one from the config's log settings, on
// stderr.
func WithClientLogger(l *slog.Logger) ClientOption {
	return func(o *clientOptions) { o.logger = l }
}

// WithClientRegistry counts the client's S3 requests in reg
// (tenure_s3_requests_total, tenure_s3_request_duration_seconds). Connect
// only: a runner's client counts into the runner's registry. Default: not
// counted.
func WithClientRegistry(reg prometheus.Registerer) ClientOption {
	return func(o *clientOptions) { o.registry = reg }
}

// WithClientTracerProvider starts the client's submit spans on tp, so that
// execution spans link to them. Default: the runner's provider for
// Runner.Client; the global one (otel.GetTracerProvider()) for Connect.
// With a no-op provider the caller's span context, if any, is still
// recorded in the task.
func WithClientTracerProvider(tp trace.TracerProvider) ClientOption {
	return func(o *clientOptions) { o.tracer = tp }
}
