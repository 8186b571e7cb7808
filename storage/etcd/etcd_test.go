package etcd_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
	"github.com/tenurehq/tenure/storage/storagetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// harness opens stores through per-store TCP proxies in front of the shared
// etcd, so the suite can partition one store while others carry on.
func harness(t *testing.T) storagetest.RunnerStoreHarness {
	srv := testenv.SharedEtcd(t)
	direct := srv.Client(t)
	var mu sync.Mutex
	proxies := map[storage.RunnerStore]*testenv.Proxy{}
	proxyOf := func(t *testing.T, s storage.RunnerStore) *testenv.Proxy {
		mu.Lock()
		defer mu.Unlock()
		p, ok := proxies[s]
		if !ok {
			t.Fatal("store not opened by this harness")
		}
		return p
	}
	ctx := func(t *testing.T) context.Context {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return c
	}
	return storagetest.RunnerStoreHarness{
		Namespace: func(t *testing.T) string { return testenv.Prefix(t) },
		Open: func(t *testing.T, ns string) storage.RunnerStore {
			u, err := url.Parse(srv.Endpoint())
			if err != nil {
				t.Fatal(err)
			}
			p := testenv.NewProxy(t, u.Host)
			cli := testenv.ClientAt(t, "http://"+p.Addr())
			s, err := etcd.New(cli, etcd.WithPrefix(ns), etcd.WithRequestTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			mu.Lock()
			proxies[s] = p
			mu.Unlock()
			return s
		},
		RevokeLease: func(t *testing.T, id int64) {
			if _, err := direct.Revoke(ctx(t), clientv3.LeaseID(id)); err != nil {
				t.Fatalf("revoke %x: %v", id, err)
			}
		},
		DeleteKey: func(t *testing.T, ns, key string) {
			if _, err := direct.Delete(ctx(t), ns+key); err != nil {
				t.Fatal(err)
			}
		},
		PutRaw: func(t *testing.T, ns, key string, value []byte) {
			if _, err := direct.Put(ctx(t), ns+key, string(value)); err != nil {
				t.Fatal(err)
			}
		},
		Isolate: func(t *testing.T, s storage.RunnerStore) func() {
			p := proxyOf(t, s)
			p.SetMode(testenv.Blackhole)
			return func() { p.SetMode(testenv.Pass) }
		},
		Disconnect: func(t *testing.T, s storage.RunnerStore) func() {
			p := proxyOf(t, s)
			p.SetMode(testenv.Reset)
			return func() { p.SetMode(testenv.Pass) }
		},
		Compact: func(t *testing.T) {
			resp, err := direct.Get(ctx(t), "compact-probe")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := direct.Compact(ctx(t), resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func TestConformance(t *testing.T) {
	storagetest.TestRunnerStore(t, harness(t))
}

func TestDialUnreachable(t *testing.T) {
	start := time.Now()
	_, err := etcd.Dial(context.Background(), etcd.DialConfig{
		Endpoints:   []string{"http://127.0.0.1:1"},
		DialTimeout: 500 * time.Millisecond,
	})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Dial of a closed port: got %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("error %q does not name the endpoint", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Dial took %s with a 500ms dial timeout", took)
	}
}

func TestCallsBoundedWhenServerUnreachable(t *testing.T) {
	cli := testenv.ClientAt(t, "http://127.0.0.1:1")
	s, err := etcd.New(cli, etcd.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	_, _, err = s.Runners(context.Background())
	if !errors.Is(err, storage.ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "runners/") {
		t.Fatalf("Runners against a closed port: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Runners took %s with a 300ms request timeout", took)
	}
}

func TestDialWrongCredentials(t *testing.T) {
	srv := testenv.NewEtcd(t)
	admin := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.UserAdd(ctx, "root", "right-password"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	// The refusal comes after the server's bcrypt check of the password,
	// which a busy machine slows: the dial's window is held open (10s) so
	// that only a wrong answer, not a slow one, fails the test.
	_, err := etcd.Dial(ctx, etcd.DialConfig{Endpoints: []string{srv.Endpoint()}, Username: "root", Password: "wrong", DialTimeout: 10 * time.Second})
	if !errors.Is(err, storage.ErrAccessDenied) {
		t.Fatalf("Dial with a wrong password: got %v, want ErrAccessDenied", err)
	}
	s, err := etcd.Dial(ctx, etcd.DialConfig{Endpoints: []string{srv.Endpoint()}, Username: "root", Password: "right-password"})
	if err != nil {
		t.Fatalf("Dial with the right password: %v", err)
	}
	defer s.Close()
	if _, _, err := s.Runners(ctx); err != nil {
		t.Fatalf("Runners with auth: %v", err)
	}
}

func TestOptionsValidated(t *testing.T) {
	cli := testenv.ClientAt(t, "http://127.0.0.1:1")
	for name, opt := range map[string]etcd.Option{
		"prefix":          etcd.WithPrefix("no-leading-slash"),
		"request timeout": etcd.WithRequestTimeout(0),
		"acquire batch":   etcd.WithAcquireConcurrency(1, 500),
	} {
		_, err := etcd.New(cli, opt)
		if !errors.Is(err, storage.ErrInvalid) || !strings.Contains(err.Error(), name) {
			t.Errorf("option %s: got %v, want ErrInvalid naming it", name, err)
		}
	}
}
