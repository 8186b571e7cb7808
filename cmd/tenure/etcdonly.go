package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// EtcdConn is a connection to a cluster's etcd alone, with its meta: what
// status, drain and config need. They work with a config that has no S3
// settings at all.
type EtcdConn struct {
	Config runner.Config
	Meta   storage.ClusterMeta
	Etcd   *etcd.Store
}

// noBucket stands in for s3.bucket while an etcd-only config is checked.
const noBucket = "unused-by-etcd-only-commands"

// LoadEtcdConfig loads the config of a command that only uses etcd. It is
// LoadConfig, except that a missing s3.bucket is no error: runner.Load
// requires it because runners and task commands need it. The config is
// loaded as it is first; only if that fails is it loaded again with a
// stand-in bucket, which succeeds exactly when the bucket was the only
// problem (the bucket is then left empty). Every other setting, S3 ones
// included, is checked as usual.
func (c *CLI) LoadEtcdConfig() (runner.Config, error) {
	cfg, err := c.LoadConfig(nil)
	if err == nil || !strings.Contains(err.Error(), "s3.bucket") {
		return cfg, err
	}
	path, environ, serr := c.configSource()
	if serr != nil {
		return runner.Config{}, err
	}
	cfg, berr := runner.Load(path, environ, []string{"s3.bucket=" + noBucket})
	if berr != nil {
		return runner.Config{}, err
	}
	cfg.S3.Bucket = ""
	c.loaded = &loadedConfig{path: path, dev: isDevConfig(path, cfg)}
	c.warnUnknownEnv(cfg)
	return cfg, nil
}

// ConnectEtcd dials the cluster's etcd and reads its meta; a cluster no
// runner has started yet gives ErrNotInitialised.
func (c *CLI) ConnectEtcd(ctx context.Context, cfg runner.Config) (*EtcdConn, error) {
	rs, err := c.dialEtcd(ctx, cfg)
	if err != nil {
		return nil, err
	}
	meta, err := rs.Meta(ctx)
	if errors.Is(err, storage.ErrNotFound) {
		err = fmt.Errorf("%w: no meta at %smeta on etcd %s (cluster %q): no runner has started it yet",
			ErrNotInitialised, rs.Prefix(), strings.Join(cfg.Etcd.Endpoints, ","), cfg.Cluster)
	}
	if err != nil {
		rs.Close()
		return nil, err
	}
	return &EtcdConn{Config: cfg, Meta: meta, Etcd: rs}, nil
}
