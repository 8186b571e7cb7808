package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/routing"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

// ErrClusterNotFound reports a cluster whose meta is not in its
// coordination store (etcd or S3): no runner has started it yet, or the
// client looks under another cluster name, etcd, bucket or coordination
// backend than its runners.
var ErrClusterNotFound = errors.New("runner: cluster not initialised")

// ErrClientClosed reports a call on a Client after its Close.
var ErrClientClosed = errors.New("runner: client closed")

// tracerName names the tracer of a Client's submit spans.
const tracerName = "github.com/tenurehq/tenure/entity/task"

// Client submits, inspects, cancels and replays the tasks of a cluster: a
// task.Client (embedded: Submit, Get, Wait, Cancel, Replay, List, Store)
// whose placement comes from the cluster meta, with the connections it
// needs. Connect makes one for any program; Runner.Client makes one that
// shares a runner's connections. Use task.SubmitInput and task.Result for
// typed inputs and results. A Client is safe for concurrent use; every call
// after Close, or after the runner it shares has stopped, fails with
// ErrClientClosed or ErrStopped.
type Client struct {
	*task.Client
	meta  storage.ClusterMeta
	group string
	// rs is the coordination store Connect opened, closed by Close; nil
	// for a runner's client, which opened nothing, and for one given
	// WithRunnerStore, which belongs to the caller.
	rs     storage.RunnerStore
	closed atomic.Bool
	// calls makes entity calls: the runner's own messaging (Runner.Client),
	// or one started on the first call (Connect; closed by Close).
	calls func() (entity.Caller, error)
	// table is the routing view of the calls (nil: none), by which
	// Submit places a task's type on its group (see typeplace.go); groups
	// are the task clients of other groups than the client's.
	table     func() (*routing.Table, error)
	groupsMu  sync.Mutex
	groups    map[string]*task.Client
	callsOnce sync.Once
	ownCalls  *calls
	callsErr  error
	// stopped, for a runner's client, reports the runner's stop.
	stopped func() error
}

// Connect returns a client of the cluster cfg names. It opens the
// coordination store cfg.Coordination names (etcd, or the S3 bucket; or
// uses WithRunnerStore's, or WithEtcdClient's client), reads the cluster
// meta there (a cluster no runner has started gives ErrClusterNotFound,
// naming where it looked), and builds the task client with the meta's shard
// count, submitting to the group WithGroup names (default: see WithGroup).
// Tasks are placed by the meta, never by cfg.Shards, so a client cannot
// put them on shards its runners do not own. The S3 store is built from
// the s3.* settings (or WithS3Client, WithAWSConfig) without a request: a
// wrong bucket or credentials show on the first call. Close releases what
// Connect opened.
func Connect(ctx context.Context, cfg Config, opts ...ClientOption) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o clientOptions
	for _, opt := range opts {
		opt(&o)
	}
	log := o.logger
	if log == nil {
		log = NewLogger(cfg.Log, os.Stderr)
	}
	if o.etcd != nil && !cfg.UsesEtcd() {
		return nil, fmt.Errorf("%w: WithEtcdClient: cluster %q coordinates on %s (coordination: %s), not etcd", ErrInvalidConfig, cfg.Cluster, CoordinationBackend(cfg), cfg.Coordination)
	}
	s3c, err := clientS3(ctx, cfg, o)
	if err != nil {
		return nil, fmt.Errorf("runner: client of cluster %q: %w", cfg.Cluster, err)
	}
	var sopts []s3store.Option
	if o.registry != nil {
		sopts = append(sopts, s3store.WithObserver(s3store.MetricsObserver(o.registry)))
	}
	rs, own := o.rs, false
	if rs == nil {
		rs, err = clientRunnerStore(ctx, cfg, o.etcd, s3c, log, sopts...)
		if err != nil {
			return nil, fmt.Errorf("runner: client of cluster %q: %w", cfg.Cluster, err)
		}
		own = true
	}
	c, err := connect(ctx, cfg, o, log, rs, s3c, sopts...)
	if err != nil {
		if own {
			rs.Close()
		}
		return nil, err
	}
	if own {
		c.rs = rs
	}
	return c, nil
}

// connect is Connect once the coordination store is open.
func connect(ctx context.Context, cfg Config, o clientOptions, log *slog.Logger, rs storage.RunnerStore, s3c *awss3.Client, sopts ...s3store.Option) (*Client, error) {
	meta, err := rs.Meta(ctx)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, fmt.Errorf("%w: no meta at %smeta on %s (cluster %q): no runner has started it yet",
			ErrClusterNotFound, CoordinationPrefix(cfg), CoordinationWhere(cfg), cfg.Cluster)
	}
	if err != nil {
		return nil, fmt.Errorf("runner: client of cluster %q: %w", cfg.Cluster, err)
	}
	obj, err := objectStore(s3c, cfg, sopts...)
	if err != nil {
		return nil, fmt.Errorf("runner: client of cluster %q: %w", cfg.Cluster, err)
	}
	if o.tracer == nil {
		o.tracer = otel.GetTracerProvider() // an embedding service's own, or InitTracing's
	}
	c, err := newClient(cfg, meta, o, log, o.tracer.Tracer(tracerName), obj, rs, nil)
	if err != nil {
		return nil, err
	}
	c.calls = func() (entity.Caller, error) {
		c.callsOnce.Do(func() {
			c.ownCalls, c.callsErr = startCalls(cfg, rs, messagingConfig(cfg, meta.Shards, c.group), "", nil, log, o.registry, o.tracer)
		})
		if c.callsErr != nil {
			return nil, c.callsErr
		}
		return c.ownCalls.client, nil
	}
	c.table = func() (*routing.Table, error) {
		if _, err := c.calls(); err != nil {
			return nil, err
		}
		return c.ownCalls.table, nil
	}
	return c, nil
}

// Client returns a client that shares the runner's coordination and S3 connections
// and its registry and tracer provider, for a service that submits tasks
// from the runner's own process. It waits until Run has connected and
// checked the cluster meta (New connects nothing, so that building a
// runner needs no context and does no I/O): start Run first, or call
// Client from another goroutine. It returns ErrStopped if Run ends first,
// and the end of ctx if that comes first. The client works while Run runs,
// through the drain of a graceful stop; once Run returns, every call fails
// with ErrStopped. WithEtcdClient, WithRunnerStore, WithS3Client,
// WithAWSConfig and WithClientRegistry are refused: the connections are
// the runner's. Close releases nothing: the runner's connections close when Run returns.
func (r *Runner) Client(ctx context.Context, opts ...ClientOption) (*Client, error) {
	var o clientOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.connects() || o.registry != nil {
		return nil, fmt.Errorf("%w: Runner.Client shares the runner's connections and registry: WithEtcdClient, WithRunnerStore, WithS3Client, WithAWSConfig and WithClientRegistry are Connect's", ErrInvalidConfig)
	}
	meta, err := r.life.wait(ctx, r.cfg.RunnerID)
	if err != nil {
		return nil, err
	}
	log := o.logger
	if log == nil {
		log = r.log
	}
	tp := o.tracer
	if tp == nil {
		tp = r.tracer
	}
	c, err := newClient(r.cfg, meta, o, log, tp.Tracer(tracerName), r.obj, r.rs, func() error { return r.life.stopped(r.cfg.RunnerID) })
	if err != nil {
		return nil, err
	}
	c.calls = func() (entity.Caller, error) {
		if cs := r.served.Load(); cs != nil {
			return cs.client, nil
		}
		return nil, fmt.Errorf("runner %s: %w", r.cfg.RunnerID, errCallsNotStarted)
	}
	c.table = func() (*routing.Table, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.calls == nil {
			return nil, fmt.Errorf("runner %s: %w", r.cfg.RunnerID, errCallsNotStarted)
		}
		return r.calls.table, nil
	}
	return c, nil
}

// newClient builds a Client on obj and waker, placing tasks by meta.
func newClient(cfg Config, meta storage.ClusterMeta, o clientOptions, log *slog.Logger, tracer trace.Tracer,
	obj storage.ObjectStore, waker storage.Waker, stopped func() error) (*Client, error) {
	group, err := submitGroup(o.group, cfg, meta)
	if err != nil {
		return nil, err
	}
	c := &Client{meta: meta, group: group, stopped: stopped}
	store := task.NewStore(guardedObjects{obj, c.check}, task.WithMaxInputSize(cfg.Entity.MaxInputSize), task.WithLogger(log))
	c.Client, err = task.NewClient(store, task.ClientConfig{
		Group: group, Shards: meta.Shards, Waker: guardedWaker{waker, c.check},
		Tracer: tracer, Defaults: o.defaults, Logger: log, PlainWakeNotes: cfg.Entity.PlainWakeNotes,
	})
	if err != nil {
		return nil, fmt.Errorf("runner: client of cluster %q: %w", cfg.Cluster, err)
	}
	return c, nil
}

// submitGroup is the group a client submits to (see WithGroup).
func submitGroup(want string, cfg Config, meta storage.ClusterMeta) (string, error) {
	switch {
	case want != "":
	case len(cfg.Groups) > 0:
		want = cfg.Groups[0]
	case slices.Contains(meta.Groups, storage.DefaultGroup) || len(meta.Groups) == 0:
		want = storage.DefaultGroup
	default:
		want = meta.Groups[0]
	}
	if !slices.Contains(meta.Groups, want) {
		return "", fmt.Errorf("%w: shard group %q is not one of cluster %q's (%s): no runner would run its tasks",
			ErrInvalidConfig, want, cfg.Cluster, strings.Join(meta.Groups, ", "))
	}
	return want, nil
}

// check fails once the client is closed or its runner has stopped.
func (c *Client) check() error {
	if c.closed.Load() {
		return ErrClientClosed
	}
	if c.stopped != nil {
		return c.stopped()
	}
	return nil
}

// Meta returns the cluster meta the client places tasks by.
func (c *Client) Meta() storage.ClusterMeta {
	m := c.meta
	m.Groups = slices.Clone(m.Groups)
	return m
}

// Group returns the shard group the client submits to.
func (c *Client) Group() string { return c.group }

// Close releases what Connect opened: the coordination store it opened (a
// store given with WithRunnerStore, or a client with WithEtcdClient, stays
// open) and the entity messaging it started. A runner's client opened
// nothing. Later calls fail with ErrClientClosed. Close is idempotent.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	// The calls' routing table watches through the coordination store: it
	// stops first. (Once also keeps a call racing Close from starting
	// messaging afterwards.)
	c.callsOnce.Do(func() { c.callsErr = ErrClientClosed })
	if c.ownCalls != nil {
		c.ownCalls.close(time.Second)
	}
	if c.rs == nil {
		return nil
	}
	return c.rs.Close()
}

// clientRunnerStore returns the coordination store of a client: on etcd,
// a store on cli when given (closing the store leaves cli open), else
// dialed from cfg; on S3, a store through s3c, the client's own S3 client.
func clientRunnerStore(ctx context.Context, cfg Config, cli *clientv3.Client, s3c *awss3.Client, log *slog.Logger, sopts ...s3store.Option) (storage.RunnerStore, error) {
	switch {
	case !cfg.UsesEtcd():
		return coordStore(s3c, cfg, log, sopts...)
	case cli == nil:
		return DialEtcd(ctx, cfg, etcd.WithLogger(log))
	}
	return etcd.New(cli, etcd.WithPrefix(EtcdPrefix(cfg.Cluster)), etcd.WithRequestTimeout(cfg.Etcd.RequestTimeout.Std()), etcd.WithLogger(log))
}

// clientS3 returns the S3 client the options give, else one built from
// cfg.
func clientS3(ctx context.Context, cfg Config, o clientOptions) (*awss3.Client, error) {
	switch {
	case o.s3 != nil:
		return o.s3, nil
	case o.aws != nil:
		ac := o.aws.Copy()
		if ac.Region == "" {
			ac.Region = cfg.S3.Region
		}
		if ac.RequestChecksumCalculation == aws.RequestChecksumCalculationUnset {
			ac.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		}
		if ac.ResponseChecksumValidation == aws.ResponseChecksumValidationUnset {
			ac.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
		return awss3.NewFromConfig(ac, func(so *awss3.Options) {
			so.UsePathStyle = cfg.S3.PathStyle
			if cfg.S3.Endpoint != "" {
				so.BaseEndpoint = aws.String(cfg.S3.Endpoint)
			}
		}, s3store.WithTracing(nil)), nil
	}
	return s3store.NewClient(ctx, s3ClientConfig(cfg))
}
