package runner

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
	s3store "github.com/tenurehq/tenure/storage/s3"
	"github.com/tenurehq/tenure/storage/s3coord"
)

// How a runner and its clients reach etcd and S3 from the configuration.

// CoordPrefix is the key prefix of the coordination objects on S3
// (coordination: s3), inside the cluster's S3 prefix: the task, state and
// schedule code lists only below its own prefixes (tasks/, ready/, state/,
// schedules/), never the bare cluster prefix, so neither sees the other's
// objects.
func CoordPrefix(cfg Config) string { return S3Prefix(cfg) + "coord/" }

// OpenRunnerStore opens the runner-storage port cfg.Coordination names:
// the configured etcd (DialEtcd, with log), or a store on conditional
// writes in the configured bucket under CoordPrefix, with the S3 request
// timeout and the s3coord poll bounds. The S3 one makes no request, so an
// unreachable bucket shows on the first call; sopts add to its object
// store's options (an observer for the S3 metrics).
func OpenRunnerStore(ctx context.Context, cfg Config, log *slog.Logger, sopts ...s3store.Option) (storage.RunnerStore, error) {
	if cfg.UsesEtcd() {
		return DialEtcd(ctx, cfg, etcd.WithLogger(log))
	}
	client, err := s3store.NewClient(ctx, s3ClientConfig(cfg))
	if err != nil {
		return nil, err
	}
	return coordStore(client, cfg, log, sopts...)
}

// coordStore is the S3 runner store through client (coordination: s3).
func coordStore(client *awss3.Client, cfg Config, log *slog.Logger, sopts ...s3store.Option) (storage.RunnerStore, error) {
	opts := append([]s3store.Option{s3store.WithPrefix(CoordPrefix(cfg)), s3store.WithRequestTimeout(cfg.S3.RequestTimeout.Std())}, sopts...)
	obj, err := s3store.New(client, cfg.S3.Bucket, opts...)
	if err != nil {
		return nil, fmt.Errorf("coordination on S3: %w", err)
	}
	return s3coord.New(obj,
		s3coord.WithRequestTimeout(cfg.S3.RequestTimeout.Std()),
		s3coord.WithPollInterval(cfg.S3Coord.PollMin.Std(), cfg.S3Coord.PollMax.Std()),
		s3coord.WithEndpoint(s3Where(client.Options(), cfg.S3.Bucket)),
		s3coord.WithLogger(log))
}

// s3Where names a bucket's place for error messages: its endpoint and
// name, as the S3 store's own errors do.
func s3Where(o awss3.Options, bucket string) string {
	base := aws.ToString(o.BaseEndpoint)
	if base == "" {
		base = "https://s3." + o.Region + ".amazonaws.com"
	}
	return strings.TrimSuffix(base, "/") + "/" + bucket
}

// coordRequestTimeout bounds one request to the coordination backend.
func (c Config) coordRequestTimeout() time.Duration {
	if c.UsesEtcd() {
		return c.Etcd.RequestTimeout.Std()
	}
	return c.S3.RequestTimeout.Std()
}

// CoordinationWhere names where a cluster's coordination records live, for
// messages: "etcd http://127.0.0.1:2379", or "S3 bucket tenure at
// http://127.0.0.1:23900"; CoordinationPrefix is their prefix there.
func CoordinationWhere(cfg Config) string {
	if cfg.UsesEtcd() {
		return "etcd " + strings.Join(cfg.Etcd.Endpoints, ",")
	}
	at := cfg.S3.Endpoint
	if at == "" {
		at = "AWS"
		if cfg.S3.Region != "" {
			at += " " + cfg.S3.Region
		}
	}
	return fmt.Sprintf("S3 bucket %s at %s", cfg.S3.Bucket, at)
}

// CoordinationPrefix is the prefix of a cluster's coordination records:
// EtcdPrefix on etcd, CoordPrefix on S3.
func CoordinationPrefix(cfg Config) string {
	if cfg.UsesEtcd() {
		return EtcdPrefix(cfg.Cluster)
	}
	return CoordPrefix(cfg)
}

// CoordinationBackend names the configured coordination backend for
// messages: "etcd" or "S3".
func CoordinationBackend(cfg Config) string {
	if cfg.UsesEtcd() {
		return "etcd"
	}
	return "S3"
}

// EtcdPrefix is a cluster's etcd key prefix.
func EtcdPrefix(cluster string) string { return "/tenure/" + cluster + "/" }

// S3Prefix is a cluster's default S3 key prefix.
func S3Prefix(cfg Config) string {
	if cfg.S3.Prefix != "" {
		return cfg.S3.Prefix
	}
	return "tenure/" + cfg.Cluster + "/"
}

// DialEtcd connects to the configured etcd (TLS, auth, dial timeout) and
// returns a store on the cluster's prefix with the configured request
// timeout; opts add to those.
func DialEtcd(ctx context.Context, cfg Config, opts ...etcd.Option) (*etcd.Store, error) {
	tlsCfg, err := EtcdTLS(cfg.Etcd)
	if err != nil {
		return nil, err
	}
	opts = append([]etcd.Option{etcd.WithPrefix(EtcdPrefix(cfg.Cluster)), etcd.WithRequestTimeout(cfg.Etcd.RequestTimeout.Std())}, opts...)
	return etcd.Dial(ctx, etcd.DialConfig{
		Endpoints:   cfg.Etcd.Endpoints,
		DialTimeout: cfg.Etcd.DialTimeout.Std(),
		TLS:         tlsCfg,
		Username:    cfg.Etcd.Username,
		Password:    cfg.Etcd.Password,
	}, opts...)
}

// NewObjectStore returns a store on the configured S3 bucket and prefix; it
// makes no request.
func NewObjectStore(ctx context.Context, cfg Config, opts ...s3store.Option) (*s3store.Store, error) {
	client, err := s3store.NewClient(ctx, s3ClientConfig(cfg))
	if err != nil {
		return nil, err
	}
	return objectStore(client, cfg, opts...)
}

// s3ClientConfig is the S3 client the s3.* settings describe.
func s3ClientConfig(cfg Config) s3store.ClientConfig {
	cc := s3store.DefaultClientConfig()
	cc.Endpoint, cc.Region, cc.UsePathStyle = cfg.S3.Endpoint, cfg.S3.Region, cfg.S3.PathStyle
	cc.AccessKey, cc.SecretKey, cc.SessionToken = cfg.S3.AccessKey, cfg.S3.SecretKey, cfg.S3.SessionToken
	// Keep a connection for every handler that may be talking to S3 at
	// once, and some for submissions and sweeps: more requests in flight
	// than idle connections kept means a new connection per request.
	cc.MaxIdleConns = max(cc.MaxIdleConns, cfg.Entity.MaxConcurrentPerRunner+64)
	return cc
}

// objectStore is the store on the configured bucket and prefix through
// client; opts add to those.
func objectStore(client *awss3.Client, cfg Config, opts ...s3store.Option) (*s3store.Store, error) {
	opts = append([]s3store.Option{s3store.WithPrefix(S3Prefix(cfg)), s3store.WithRequestTimeout(cfg.S3.RequestTimeout.Std())}, opts...)
	return s3store.New(client, cfg.S3.Bucket, opts...)
}

// OpenObjectStore is NewObjectStore followed by a check of the bucket
// (credentials, existence, reachability) with one bounded request.
func OpenObjectStore(ctx context.Context, cfg Config, opts ...s3store.Option) (*s3store.Store, error) {
	obj, err := NewObjectStore(ctx, cfg, opts...)
	if err != nil {
		return nil, err
	}
	if err := obj.Check(ctx); err != nil {
		return nil, err
	}
	return obj, nil
}

// EtcdTLS builds the TLS config of an etcd connection: nil for plain
// connections; the system roots for https:// endpoints without a CA file.
// TLS settings with an http:// endpoint are refused (the etcd client would
// ignore them), as Config.Validate does. The client certificate is
// reloaded when cert_file or key_file changes (each new connection asks
// for it), so a rotated certificate needs no restart; files that do not
// load keep the previous pair in use, with a warning.
func EtcdTLS(c EtcdConfig) (*tls.Config, error) {
	if err := c.checkSchemes(); err != nil {
		return nil, err
	}
	https := slices.ContainsFunc(c.Endpoints, func(e string) bool { return strings.HasPrefix(e, "https://") })
	if c.CAFile == "" && c.CertFile == "" && !https {
		return nil, nil
	}
	return clientFiles(&tls.Config{ServerName: c.ServerName, MinVersion: tls.VersionTLS12}, "etcd.ca_file", c.CAFile,
		"etcd.cert_file/key_file", c.CertFile, c.KeyFile)
}

// ErrOtherBackend reports a runner whose cluster's bucket says the
// cluster coordinates on the other backend: runners of one cluster on
// both backends would each see only their own kind, and both would own
// every shard.
var ErrOtherBackend = errors.New("runner: the cluster coordinates on the other backend")

// etcdMarkKey is the object, under the cluster's S3 prefix, that says the
// cluster coordinates on etcd; s3MarkKey is the S3 backend's meta, which
// says it coordinates on S3.
const (
	etcdMarkKey = "coordination/etcd"
	s3MarkKey   = "coord/meta"
)

// checkBackend refuses to start a runner whose cluster's bucket shows
// runners on the other backend. Each backend marks the bucket: an etcd
// runner creates etcdMarkKey (once per cluster), an S3 runner's cluster
// meta is s3MarkKey (written by EnsureMeta). A runner looks for the other
// backend's mark before it writes anything (mark false), so that a runner
// started on the wrong backend leaves no mark of its own that would stop
// the cluster's runners at their next start; and again once its own mark
// is written (mark true: an etcd runner writes it here, an S3 runner's
// EnsureMeta has), so that of two runners of one cluster started on
// different backends at once, at least one sees the other's mark and
// refuses: never both run. A cluster moves between backends with every
// runner stopped and the other backend's objects deleted
// (docs/operations.md); the error says which.
func (r *Runner) checkBackend(ctx context.Context, mark bool) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.S3.RequestTimeout.Std())
	defer cancel()
	other, otherName, ours := s3MarkKey, "coordination: s3", "etcd"
	if r.cfg.UsesEtcd() && mark {
		body, _ := json.Marshal(map[string]string{"coordination": CoordinationEtcd, "cluster": r.cfg.Cluster, "written_by": r.cfg.RunnerID})
		if _, err := r.obj.Create(ctx, etcdMarkKey, body); err != nil && !errors.Is(err, storage.ErrPrecondition) {
			return fmt.Errorf("runner %s: marking the bucket as coordinated on etcd (%s%s): %w", r.cfg.RunnerID, S3Prefix(r.cfg), etcdMarkKey, err)
		}
	}
	if !r.cfg.UsesEtcd() {
		other, otherName, ours = etcdMarkKey, "coordination: etcd", "s3"
	}
	_, err := r.obj.Head(ctx, other)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("runner %s: checking the bucket for the other coordination backend's records (%s%s): %w", r.cfg.RunnerID, S3Prefix(r.cfg), other, err)
	}
	if ours == "etcd" {
		return fmt.Errorf("runner %s: cluster %q: %w: coordination is etcd here, but the bucket holds %s%s, written by a runner with %s; runners on both would each own every shard. Set coordination: s3, or, to move the cluster back to etcd, stop every runner and delete the objects under %s",
			r.cfg.RunnerID, r.cfg.Cluster, ErrOtherBackend, S3Prefix(r.cfg), other, otherName, CoordPrefix(r.cfg))
	}
	return fmt.Errorf("runner %s: cluster %q: %w: coordination is s3 here, but the bucket holds %s%s, written by a runner with %s; runners on both would each own every shard. Set coordination: etcd, or, to move the cluster to S3, stop every runner and delete %s%s (and, to start afresh, %s)",
		r.cfg.RunnerID, r.cfg.Cluster, ErrOtherBackend, S3Prefix(r.cfg), other, otherName, S3Prefix(r.cfg), other, CoordPrefix(r.cfg))
}
