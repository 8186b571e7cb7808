package harness

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/tenurehq/tenure/internal/netproxy"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// dialTimeout bounds connecting a store to etcd (or to a proxy in front of
// it): generous, as the machine may be shared and busy.
const dialTimeout = 10 * time.Second

// Cleaner takes the work to do when a cluster's owner ends: closing its
// stores and proxies, stopping its members. testing.TB is one; the bench
// passes its run's list of closers.
type Cleaner interface {
	Cleanup(func())
}

// S3 is where a cluster's objects are: a bucket on an S3 endpoint
// reachable with path-style addressing.
type S3 struct {
	Endpoint  string
	Region    string
	AccessKey string
	SecretKey string
	Bucket    string
}

// Spec names a cluster: where its servers are, where its keys live, and its
// shape.
type Spec struct {
	// Name is the cluster's name as runners are configured with it (the
	// cluster key); empty for clusters built below the runner.
	Name string
	// Etcd is the client URL of the etcd server members reach.
	Etcd string
	// Prefix is the cluster's etcd key prefix (a test's own, or a runner
	// cluster's runner.EtcdPrefix).
	Prefix string
	// Meta is the cluster's shape as members record it.
	Meta storage.ClusterMeta
	// S3 is the cluster's bucket; zero for clusters that keep no objects.
	S3 S3
}

// Cluster is one test cluster's servers and namespace. What it opens
// (stores, proxies) is closed through its Cleaner.
type Cluster struct {
	Spec
	env Cleaner
}

// New returns the cluster spec describes; what it opens is closed by env.
func New(env Cleaner, spec Spec) *Cluster {
	return &Cluster{Spec: spec, env: env}
}

// Proxy starts a TCP proxy in front of the cluster's etcd, closed at
// cleanup: a member's own way to etcd, so that a test can cut that member
// off alone. Its client URL is ProxyURL(p).
func (c *Cluster) Proxy() (*netproxy.Proxy, error) {
	u, err := url.Parse(c.Etcd)
	if err != nil {
		return nil, fmt.Errorf("harness: etcd endpoint %q: %w", c.Etcd, err)
	}
	p, err := netproxy.New(u.Host)
	if err != nil {
		return nil, fmt.Errorf("harness: etcd proxy: %w", err)
	}
	c.env.Cleanup(p.Close)
	return p, nil
}

// ProxyURL is the etcd client URL of a proxy from Cluster.Proxy.
func ProxyURL(p *netproxy.Proxy) string { return "http://" + p.Addr() }

// Store connects a store of the cluster's keys to etcd at endpoint (the
// cluster's own etcd when empty) with opts, and closes it at cleanup.
func (c *Cluster) Store(ctx context.Context, endpoint string, opts ...etcd.Option) (*etcd.Store, error) {
	if endpoint == "" {
		endpoint = c.Etcd
	}
	st, err := etcd.Dial(ctx, etcd.DialConfig{Endpoints: []string{endpoint}, DialTimeout: dialTimeout},
		append([]etcd.Option{etcd.WithPrefix(c.Prefix)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("harness: store of %s at %s: %w", c.Prefix, endpoint, err)
	}
	c.env.Cleanup(func() { st.Close() })
	return st, nil
}

// ProxiedStore is a member's store: one of the cluster's keys reached
// through a proxy of its own (see Proxy), with opts.
func (c *Cluster) ProxiedStore(ctx context.Context, opts ...etcd.Option) (*etcd.Store, *netproxy.Proxy, error) {
	p, err := c.Proxy()
	if err != nil {
		return nil, nil, err
	}
	st, err := c.Store(ctx, ProxyURL(p), opts...)
	if err != nil {
		return nil, nil, err
	}
	return st, p, nil
}

// RunnerConfig returns the runner config keys, as key=value overrides,
// that put a tenure runner in the cluster with etcd at etcdEndpoint (a
// proxy's, or the cluster's own): its name, its shard count, its etcd and
// its bucket.
func (c *Cluster) RunnerConfig(etcdEndpoint string) []string {
	return []string{
		"cluster=" + c.Name,
		"shards=" + strconv.Itoa(c.Meta.Shards),
		"etcd.endpoints=" + etcdEndpoint,
		// The region is set: the embedded S3 checks it, and an unset one
		// would follow the machine's AWS environment.
		"s3.endpoint=" + c.S3.Endpoint,
		"s3.region=" + c.S3.Region,
		"s3.bucket=" + c.S3.Bucket,
		"s3.path_style=true",
		"s3.access_key=" + c.S3.AccessKey,
		"s3.secret_key=" + c.S3.SecretKey,
	}
}

// Holders reads the shard locks: shard → the id of the runner holding it.
func Holders(ctx context.Context, locks storage.ShardLockReader) (map[storage.ShardID]string, error) {
	ls, _, err := locks.ShardLocks(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[storage.ShardID]string, len(ls))
	for _, l := range ls {
		out[l.Shard] = l.RunnerID
	}
	return out, nil
}
