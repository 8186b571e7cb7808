package entity

import (
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/s3count"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

// countOnWire routes the env's S3 traffic through counting proxies
// (internal/s3count), so that a test counts requests as S3 sees them, SDK
// retries included: every runner started afterwards reaches S3 through
// runners (opts configure it, e.g. injected faults), and client, a task
// client of its own, through clientWire. The runners' stores keep
// reporting to e.ops, the stores' own per-call count, for comparison (the
// client's store does not). Call it before e.start.
func (e *env) countOnWire(opts ...s3count.Option) (runners, clientWire *s3count.Proxy, client *task.Client) {
	return e.countOnWireWith(nil, opts...)
}

// countOnWireWith is countOnWire, with cfg (if not nil) changing the
// client's config before the client is made.
func (e *env) countOnWireWith(cfg func(*task.ClientConfig), opts ...s3count.Option) (runners, clientWire *s3count.Proxy, client *task.Client) {
	t := e.t
	t.Helper()
	s3 := testenv.SharedS3(t)
	proxy := func(opts ...s3count.Option) *s3count.Proxy {
		p, err := s3count.New(s3.Endpoint(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	runners, clientWire = proxy(opts...), proxy()
	ak, sk := s3.Credentials()
	storeAt := func(p *s3count.Proxy, opts ...s3store.Option) *s3store.Store {
		obj, err := s3store.New(testenv.NewS3Client(p.URL(), s3.Region(), ak, sk), e.S3.Bucket,
			append([]s3store.Option{s3store.WithPrefix("tenure/test/")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	// The runner's own store (on the direct client) has made no request:
	// the proxied one replaces it.
	e.wrap = func(string, storage.ObjectStore) storage.ObjectStore {
		return storeAt(runners, s3store.WithObserver(e.ops.observe))
	}
	waker, err := etcd.New(e.srv.Client(t), etcd.WithPrefix(e.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waker.Close() })
	ccfg := task.ClientConfig{Shards: e.Meta.Shards, Waker: waker, Logger: e.logs.logger("client")}
	if cfg != nil {
		cfg(&ccfg)
	}
	client, err = task.NewClient(task.NewStore(storeAt(clientWire), task.WithLogger(e.logs.logger("tasks"))), ccfg)
	if err != nil {
		t.Fatal(err)
	}
	return runners, clientWire, client
}
