package s3

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/storagetest"
)

// clientConfig returns a ClientConfig for the shared gateway.
func clientConfig(t testing.TB) ClientConfig {
	t.Helper()
	gw := testenv.SharedS3(t)
	c := DefaultClientConfig()
	c.Endpoint, c.Region, c.UsePathStyle = gw.Endpoint(), gw.Region(), true
	c.AccessKey, c.SecretKey = gw.Credentials()
	return c
}

// newClient builds a client with NewClient, then gives it a transport whose
// idle connections close at cleanup: the embedded gateway's graceful
// shutdown otherwise waits its full 10s for pooled connections at exit.
func newClient(t testing.TB, c ClientConfig) *awss3.Client {
	t.Helper()
	cli, err := NewClient(testCtx(t), c)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return closingIdle(t, cli)
}

func closingIdle(t testing.TB, cli *awss3.Client) *awss3.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return awss3.New(cli.Options(), func(o *awss3.Options) { o.HTTPClient = &http.Client{Transport: tr} })
}

// openStore returns a store on a fresh bucket of the shared gateway, under
// a prefix, through a client built by NewClient.
func openStore(t testing.TB, opts ...Option) *Store {
	t.Helper()
	bucket := testenv.SharedS3(t).Bucket(t)
	opts = append([]Option{WithPrefix("tenure/" + testenv.Name(t, 40) + "/")}, opts...)
	s, err := New(newClient(t, clientConfig(t)), bucket, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu   sync.Mutex
	ops  []string
	errs []error
}

func (r *recorder) observe(op string, err error, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
	r.errs = append(r.errs, err)
}

func (r *recorder) count(op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.ops {
		if o == op {
			n++
		}
	}
	return n
}

func TestConformance(t *testing.T) {
	storagetest.TestObjectStore(t, func(t *testing.T) storage.ObjectStore { return openStore(t) })
}

func TestConformanceWithoutPrefix(t *testing.T) {
	// A client not built by NewClient (testenv's options: the SDK's default
	// retryer) and keys at the bucket's root.
	storagetest.TestObjectStore(t, func(t *testing.T) storage.ObjectStore {
		gw := testenv.SharedS3(t)
		s, err := New(closingIdle(t, gw.Client()), gw.Bucket(t))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return s
	})
}

func TestPrefixIsolatesStores(t *testing.T) {
	gw := testenv.SharedS3(t)
	bucket := gw.Bucket(t)
	cli := newClient(t, clientConfig(t))
	ctx := testCtx(t)
	a, err := New(cli, bucket, WithPrefix("tenure/a/"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cli, bucket, WithPrefix("tenure/b/"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{a, b} {
		if _, err := s.Create(ctx, "k", []byte(s.Prefix())); err != nil {
			t.Fatalf("Create in %s: %v", s.Prefix(), err)
		}
	}
	for _, s := range []*Store{a, b} {
		o, err := s.Get(ctx, "k")
		if err != nil || string(o.Body) != s.Prefix() || o.Key != "k" {
			t.Fatalf("Get k in %s: %+v, %v", s.Prefix(), o, err)
		}
		page, err := s.List(ctx, "", storage.ListOptions{})
		if err != nil || len(page.Objects) != 1 || page.Objects[0].Key != "k" {
			t.Fatalf("List in %s: %+v, %v; want just k", s.Prefix(), page, err)
		}
	}
	out, err := gw.Client().ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var raw []string
	for _, o := range out.Contents {
		raw = append(raw, aws.ToString(o.Key))
	}
	if strings.Join(raw, ",") != "tenure/a/k,tenure/b/k" {
		t.Fatalf("bucket holds %q, want the two prefixed keys", raw)
	}
}

func TestErrorsNameEndpointBucketAndKey(t *testing.T) {
	s := openStore(t)
	_, err := s.Get(testCtx(t), "no/such/key")
	var oe *storage.OpError
	if !errors.Is(err, storage.ErrNotFound) || !errors.As(err, &oe) {
		t.Fatalf("Get of a missing key: %v", err)
	}
	gw := testenv.SharedS3(t)
	full := s.Prefix() + "no/such/key"
	if oe.Backend != "s3" || oe.Op != "get" || oe.Key != full || oe.Endpoint != gw.Endpoint()+"/"+s.Bucket() {
		t.Fatalf("OpError = %+v, want s3 get %s at %s/%s", oe, full, gw.Endpoint(), s.Bucket())
	}
	for _, part := range []string{gw.Endpoint(), s.Bucket(), full, "NoSuchKey"} {
		if !strings.Contains(err.Error(), part) {
			t.Fatalf("error %q does not mention %q", err, part)
		}
	}
}

func TestCheck(t *testing.T) {
	if err := openStore(t).Check(testCtx(t)); err != nil {
		t.Fatalf("Check of a good bucket: %v", err)
	}
}

func TestMissingBucket(t *testing.T) {
	bucket := "missing-" + testenv.Name(t, 40)
	s, err := New(newClient(t, clientConfig(t)), bucket, WithPrefix("p/"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	calls := map[string]func() error{
		"Check":  func() error { return s.Check(ctx) },
		"Create": func() error { _, err := s.Create(ctx, "k", nil); return err },
		"Put":    func() error { _, err := s.Put(ctx, "k", nil); return err },
		"Get":    func() error { _, err := s.Get(ctx, "k"); return err },
		"List":   func() error { _, err := s.List(ctx, "", storage.ListOptions{}); return err },
		"Delete": func() error { return s.Delete(ctx, "k") },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, storage.ErrNoBucket) || !strings.Contains(err.Error(), bucket) {
			t.Fatalf("%s on a missing bucket: %v, want ErrNoBucket naming %s", name, err, bucket)
		}
	}
}

func TestWrongCredentials(t *testing.T) {
	bucket := testenv.SharedS3(t).Bucket(t)
	ctx := testCtx(t)
	badSecret := clientConfig(t)
	badSecret.SecretKey = "not-the-secret"
	unknownKey := clientConfig(t)
	unknownKey.AccessKey = "no-such-access-key"
	for name, cfg := range map[string]ClientConfig{"wrong secret": badSecret, "unknown access key": unknownKey} {
		s, err := New(newClient(t, cfg), bucket)
		if err != nil {
			t.Fatal(err)
		}
		calls := map[string]func() error{
			"Check":   func() error { return s.Check(ctx) },
			"Create":  func() error { _, err := s.Create(ctx, "k", nil); return err },
			"Replace": func() error { _, err := s.Replace(ctx, "k", nil, `"x"`); return err },
			"Get":     func() error { _, err := s.Get(ctx, "k"); return err },
			"List":    func() error { _, err := s.List(ctx, "", storage.ListOptions{}); return err },
		}
		for op, call := range calls {
			if err := call(); !errors.Is(err, storage.ErrAccessDenied) {
				t.Fatalf("%s with %s: %v, want ErrAccessDenied", op, name, err)
			}
		}
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// silentServer accepts connections and never answers, until cleanup.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

func TestUnreachableEndpoint(t *testing.T) {
	const timeout = time.Second
	for name, addr := range map[string]string{"closed port": closedAddr(t), "silent server": silentServer(t)} {
		t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) {
			t.Parallel()
			cfg := clientConfig(t)
			cfg.Endpoint = "http://" + addr
			s, err := New(newClient(t, cfg), "bucket", WithRequestTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			calls := map[string]func(context.Context) error{
				"Check":      func(ctx context.Context) error { return s.Check(ctx) },
				"Create":     func(ctx context.Context) error { _, err := s.Create(ctx, "k", []byte("x")); return err },
				"Get":        func(ctx context.Context) error { _, err := s.Get(ctx, "k"); return err },
				"List":       func(ctx context.Context) error { _, err := s.List(ctx, "", storage.ListOptions{}); return err },
				"ServerTime": func(ctx context.Context) error { _, err := s.ServerTime(ctx); return err },
			}
			var wg sync.WaitGroup
			for op, call := range calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					err := call(context.Background())
					elapsed := time.Since(start)
					if !errors.Is(err, storage.ErrUnavailable) || !storage.IsRetryable(err) {
						t.Errorf("%s: %v, want ErrUnavailable", op, err)
						return
					}
					if !strings.Contains(err.Error(), addr) {
						t.Errorf("%s: error %q does not name the endpoint %s", op, err, addr)
					}
					// The request timeout is the protocol bound under test.
					if elapsed > timeout+time.Second {
						t.Errorf("%s took %s, beyond the %s request timeout", op, elapsed, timeout)
					}
				}()
			}
			wg.Wait()
		})
	}
}

func TestMaxObjectSize(t *testing.T) {
	s := openStore(t, WithMaxObjectSize(10))
	ctx := testCtx(t)
	if _, err := s.Put(ctx, "ten", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "ten"); err != nil {
		t.Fatalf("Get at the limit: %v", err)
	}
	if _, err := s.Put(ctx, "eleven", []byte("0123456789A")); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(ctx, "eleven")
	if !errors.Is(err, storage.ErrTooLarge) || !strings.Contains(err.Error(), "eleven") {
		t.Fatalf("Get over the limit: %v, want ErrTooLarge naming the key", err)
	}
}

func TestKeyLengthIncludesPrefix(t *testing.T) {
	s := openStore(t)
	// Segments of at most 200 bytes: file-backed servers store each segment
	// as a file name, limited to 255 bytes.
	var b strings.Builder
	for b.Len() < MaxKeyLength-len(s.Prefix()) {
		if b.Len()%200 == 199 {
			b.WriteByte('/')
		} else {
			b.WriteByte('k')
		}
	}
	exact := b.String()
	exact = exact[:len(exact)-1] + "k" // not a "directory" key
	key := exact + "k"
	_, err := s.Put(testCtx(t), key, nil)
	if !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("Put of a key %d bytes long with the prefix: %v, want ErrInvalid", len(s.Prefix())+len(key), err)
	}
	if _, err := s.Put(testCtx(t), exact, nil); err != nil {
		t.Fatalf("Put of a key exactly %d bytes long with the prefix: %v", len(s.Prefix())+len(exact), err)
	}
}

func TestObserverSeesEveryRequest(t *testing.T) {
	rec := &recorder{}
	s := openStore(t, WithObserver(rec.observe))
	ctx := testCtx(t)
	etag, _ := s.Create(ctx, "k", []byte("1"))
	s.Create(ctx, "k", []byte("2"))
	s.Replace(ctx, "k", []byte("3"), etag)
	s.Get(ctx, "k")
	s.Put(ctx, "", nil) // refused before any request: not observed
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []string{"create", "create", "replace", "get"}
	if strings.Join(rec.ops, ",") != strings.Join(want, ",") {
		t.Fatalf("observed %q, want %q", rec.ops, want)
	}
	if rec.errs[0] != nil || !errors.Is(rec.errs[1], storage.ErrPrecondition) || rec.errs[2] != nil {
		t.Fatalf("observed errors %v", rec.errs)
	}
}
