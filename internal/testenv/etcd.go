package testenv

import (
	"os"
	"path"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenurehq/tenure/internal/embedded"
)

// Etcd is an embedded etcd server for tests.
type Etcd struct {
	*embedded.Etcd
}

var (
	sharedEtcdOnce sync.Once
	sharedEtcd     *Etcd
	sharedEtcdErr  error
)

// SharedEtcd returns the test binary's shared etcd server, starting it on
// first use. Tests isolate themselves with Prefix.
func SharedEtcd(t testing.TB) *Etcd {
	t.Helper()
	sharedEtcdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tenure-etcd-")
		if err != nil {
			sharedEtcdErr = err
			return
		}
		e, err := embedded.StartEtcd(embedded.EtcdConfig{Dir: dir, Fast: true})
		if err != nil {
			os.RemoveAll(dir)
			sharedEtcdErr = err
			return
		}
		sharedEtcd = &Etcd{e}
		atExit(func() {
			e.Close()
			os.RemoveAll(dir)
		})
	})
	if sharedEtcdErr != nil {
		t.Fatalf("testenv: shared etcd: %v", sharedEtcdErr)
	}
	return sharedEtcd
}

// NewEtcd starts an etcd server owned by the test (for tests that stop or
// disturb the server) and stops it at cleanup.
func NewEtcd(t testing.TB) *Etcd {
	t.Helper()
	e, err := embedded.StartEtcd(embedded.EtcdConfig{Dir: t.TempDir(), Fast: true})
	if err != nil {
		t.Fatalf("testenv: etcd: %v", err)
	}
	t.Cleanup(e.Close)
	return &Etcd{e}
}

// Client returns a client of the server, closed at cleanup (before the
// server of a NewEtcd, since cleanups run last-registered first).
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return ClientAt(t, e.Endpoint())
}

// ClientAt returns an etcd client of endpoint (for instance a proxy in front
// of the server), closed at cleanup.
func ClientAt(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("testenv: etcd client for %s: %v", endpoint, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Prefix returns a key prefix unique to this call, "/tenure-test/<name>/",
// so tests sharing a server do not see each other's keys.
func Prefix(t testing.TB) string {
	return path.Join("/tenure-test", Name(t, 60)) + "/"
}

// NewEtcdCluster starts an n-member etcd cluster owned by the test and stops
// it at cleanup.
func NewEtcdCluster(t testing.TB, n int) []*Etcd {
	t.Helper()
	ms, err := embedded.StartEtcdCluster(t.TempDir(), n, nil)
	if err != nil {
		t.Fatalf("testenv: etcd cluster: %v", err)
	}
	out := make([]*Etcd, n)
	for i, m := range ms {
		t.Cleanup(m.Close)
		out[i] = &Etcd{m}
	}
	return out
}
