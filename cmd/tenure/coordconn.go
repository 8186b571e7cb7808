package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

// CoordConn is a connection to a cluster's coordination store alone (etcd
// or S3, as the config's coordination key says), with its meta: what
// status, drain and config need. On etcd they work with a config that has
// no S3 settings at all.
type CoordConn struct {
	Config runner.Config
	Meta   storage.ClusterMeta
	Store  storage.RunnerStore
}

// noBucket stands in for s3.bucket while a coordination-only config is
// checked.
const noBucket = "unused-by-etcd-only-commands"

// LoadCoordConfig loads the config of a command that only uses the
// coordination store. It is LoadConfig, except that on etcd a missing
// s3.bucket is no error: runner.Load requires it because runners and task
// commands need it. The config is loaded as it is first; only if that
// fails is it loaded again with a stand-in bucket, which succeeds exactly
// when the bucket was the only problem (the bucket is then left empty).
// Every other setting, S3 ones included, is checked as usual. On S3
// (coordination: s3) the bucket is the coordination store: it stays
// required.
func (c *CLI) LoadCoordConfig() (runner.Config, error) {
	cfg, err := c.LoadConfig(nil)
	if err == nil || !strings.Contains(err.Error(), "s3.bucket") {
		return cfg, err
	}
	path, environ, serr := c.configSource()
	if serr != nil {
		return runner.Config{}, err
	}
	cfg, berr := runner.Load(path, environ, []string{"s3.bucket=" + noBucket})
	if berr != nil || !cfg.UsesEtcd() {
		return runner.Config{}, err
	}
	cfg.S3.Bucket = ""
	c.loaded = &loadedConfig{path: path, dev: isDevConfig(path, cfg)}
	c.warnUnknownEnv(cfg)
	return cfg, nil
}

// ConnectCoord opens the cluster's coordination store and reads its meta;
// a cluster no runner has started yet gives ErrNotInitialised.
func (c *CLI) ConnectCoord(ctx context.Context, cfg runner.Config) (*CoordConn, error) {
	rs, err := c.openCoord(ctx, cfg)
	if err != nil {
		return nil, err
	}
	meta, err := rs.Meta(ctx)
	if errors.Is(err, storage.ErrNotFound) {
		err = fmt.Errorf("%w: no meta at %smeta on %s (cluster %q): no runner has started it yet",
			ErrNotInitialised, runner.CoordinationPrefix(cfg), runner.CoordinationWhere(cfg), cfg.Cluster)
	}
	if err != nil {
		rs.Close()
		return nil, err
	}
	return &CoordConn{Config: cfg, Meta: meta, Store: rs}, nil
}

// openCoord opens the configured coordination store on the cluster's
// keys: etcd through dialEtcd, which fails fast on an endpoint nothing
// listens at; S3 without a request, after the same probe of s3.endpoint
// when it is set: the S3 client retries a refused connection for seconds
// before it gives up.
func (c *CLI) openCoord(ctx context.Context, cfg runner.Config) (storage.RunnerStore, error) {
	if cfg.UsesEtcd() {
		return c.dialEtcd(ctx, cfg)
	}
	if cfg.S3.Endpoint != "" {
		var dead *deadEndpointsError
		if err := probeEndpoints(ctx, []string{cfg.S3.Endpoint}); errors.As(err, &dead) {
			return nil, &storage.OpError{Backend: "s3", Op: "dial", Endpoint: cfg.S3.Endpoint + "/" + cfg.S3.Bucket,
				Err: storage.Wrap(storage.ErrUnavailable, dead)}
		}
	}
	logger := slog.New(slog.NewTextHandler(c.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return runner.OpenRunnerStore(ctx, cfg, logger)
}
