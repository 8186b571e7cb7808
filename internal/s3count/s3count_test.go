package s3count_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/s3count"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestClassify(t *testing.T) {
	req := func(method, target string, header ...string) *http.Request {
		r := httptest.NewRequest(method, target, nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return r
	}
	for _, tc := range []struct {
		r     *http.Request
		want  s3count.Op
		class string
	}{
		{req("PUT", "/b/tenure/tasks/k.json", "If-None-Match", "*"), s3count.OpCreate, s3count.ClassPut},
		{req("PUT", "/b/tenure/tasks/k.json", "If-Match", `"abc"`), s3count.OpReplace, s3count.ClassPut},
		{req("PUT", "/b/tenure/ready/0/p"), s3count.OpPut, s3count.ClassPut},
		{req("PUT", "/b/k", "X-Amz-Copy-Source", "/b/other"), s3count.OpCopy, s3count.ClassPut},
		{req("GET", "/b/k/with/slashes"), s3count.OpGet, s3count.ClassGet},
		{req("HEAD", "/b/k"), s3count.OpHead, s3count.ClassGet},
		{req("DELETE", "/b/k"), s3count.OpDelete, s3count.ClassDelete},
		{req("GET", "/b?list-type=2&prefix=tenure%2F&max-keys=1000"), s3count.OpList, s3count.ClassPut},
		{req("GET", "/b/?list-type=2"), s3count.OpList, s3count.ClassPut},
		{req("GET", "/b?prefix=x"), s3count.OpListV1, s3count.ClassPut},
		{req("GET", "/b?versioning"), s3count.OpOther, s3count.ClassGet},
		{req("HEAD", "/b"), s3count.OpHeadBucket, s3count.ClassGet},
		{req("PUT", "/b"), s3count.OpCreateBucket, s3count.ClassPut},
		{req("POST", "/b?delete"), s3count.OpDeleteObjects, s3count.ClassDelete},
		{req("GET", "/"), s3count.OpOther, s3count.ClassGet},
		{req("PUT", "/b/k?tagging"), s3count.OpOther, s3count.ClassGet},
		{req("POST", "/b/k?uploads"), s3count.OpOther, s3count.ClassGet},
	} {
		if got := s3count.Classify(tc.r); got != tc.want || got.Class() != tc.class {
			t.Errorf("%s %s %v: %s (%s), want %s (%s)", tc.r.Method, tc.r.URL, tc.r.Header, got, got.Class(), tc.want, tc.class)
		}
	}
}

func TestNewRejectsBadTarget(t *testing.T) {
	for _, target := range []string{"", "127.0.0.1:9000", "ftp://x:1", "http://"} {
		if _, err := s3count.New(target); !errors.Is(err, s3count.ErrInvalidTarget) {
			t.Errorf("New(%q): %v, want ErrInvalidTarget", target, err)
		}
	}
}

func TestCountsArithmetic(t *testing.T) {
	a := s3count.Counts{Requests: map[s3count.Op]int{"get": 3, "put": 1}, Retries: map[s3count.Op]int{"get": 1}}
	b := s3count.Counts{Requests: map[s3count.Op]int{"get": 1, "put": 1}}
	d := a.Sub(b)
	if !maps.Equal(d.Requests, map[s3count.Op]int{"get": 2}) || d.Retries["get"] != 1 {
		t.Fatalf("Sub = %+v", d)
	}
	if s := a.Add(b); s.Requests["get"] != 4 || s.Total() != 6 || s.ByClass()[s3count.ClassPut] != 2 {
		t.Fatalf("Add = %+v", s)
	}
	if got := d.String(); got != "get=2 (retries: get=1)" {
		t.Fatalf("String = %q", got)
	}
}

// opLog is a store observer: the store's own per-call count, the
// self-reported figure the proxy is compared with.
type opLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *opLog) observe(op string, _ error, _ time.Duration) {
	o.mu.Lock()
	o.n[op]++
	o.mu.Unlock()
}

func (o *opLog) get(op string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[op]
}

// storeVia opens an s3 store on a fresh bucket through a counting proxy
// with the given fault hook; the SDK retries up to 3 attempts.
func storeVia(t *testing.T, opts ...s3count.Option) (*s3store.Store, *s3count.Proxy, *opLog) {
	t.Helper()
	s3 := testenv.SharedS3(t)
	bucket := s3.Bucket(t)
	p, err := s3count.New(s3.Endpoint(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ak, sk := s3.Credentials()
	cc := s3store.DefaultClientConfig()
	cc.Endpoint, cc.Region, cc.UsePathStyle, cc.AccessKey, cc.SecretKey = p.URL(), s3.Region(), true, ak, sk
	cc.MaxAttempts, cc.MaxBackoff = 3, 50*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := s3store.NewClient(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	log := &opLog{n: map[string]int{}}
	st, err := s3store.New(client, bucket, s3store.WithPrefix("count/"), s3store.WithObserver(log.observe),
		s3store.WithRequestTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return st, p, log
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestCountsEveryStoreOperation: each call of the s3 store is one request
// of the expected operation on the wire, when nothing fails.
func TestCountsEveryStoreOperation(t *testing.T) {
	testenv.CheckLeaks(t)
	st, p, _ := storeVia(t)
	ctx := ctxFor(t)
	etag, err := st.Create(ctx, "a", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Replace(ctx, "a", []byte("2"), etag); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, "b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Head(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.List(ctx, "", storage.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := st.Check(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[s3count.Op]int{s3count.OpCreate: 1, s3count.OpReplace: 1, s3count.OpPut: 1, s3count.OpGet: 1,
		s3count.OpHead: 1, s3count.OpList: 2, s3count.OpDelete: 1}
	got := p.Counts()
	if !maps.Equal(got.Requests, want) || len(got.Retries) != 0 || len(got.Failed) != 0 {
		t.Fatalf("counts %s, want %v and no retry or failure", got, want)
	}
}

// TestCountsSDKRetries: a request the proxy answers with a 503, or whose
// connection it resets, is retried by the SDK and the call succeeds; the
// proxy counts both attempts (and marks the second a retry), while the
// store's own per-call count — what tenure_s3_requests_total and the old
// cost figures were built from — sees one call.
func TestCountsSDKRetries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault s3count.Fault
	}{{"503", s3count.Fail503}, {"reset", s3count.Reset}} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.CheckLeaks(t)
			var mu sync.Mutex
			createFault, getFault := s3count.FailFirst(s3count.OpCreate, 1, tc.fault), s3count.FailFirst(s3count.OpGet, 1, tc.fault)
			hook := func(r s3count.Request) s3count.Fault {
				mu.Lock()
				defer mu.Unlock()
				if f := createFault(r); f != s3count.Forward {
					return f
				}
				return getFault(r)
			}
			st, p, log := storeVia(t, s3count.WithFaults(hook))
			ctx := ctxFor(t)
			if _, err := st.Create(ctx, "task.json", []byte(`{"v":1}`)); err != nil {
				t.Fatalf("create through one injected %s: %v", tc.name, err)
			}
			obj, err := st.Get(ctx, "task.json")
			if err != nil || string(obj.Body) != `{"v":1}` {
				t.Fatalf("get through one injected %s: %q, %v", tc.name, obj.Body, err)
			}
			c := p.Counts()
			for _, op := range []s3count.Op{s3count.OpCreate, s3count.OpGet} {
				if c.Requests[op] != 2 || c.Injected[op] != 1 || c.Failed[op] != 1 {
					t.Errorf("%s on the wire: %s; want 2 requests, 1 injected, 1 failed", op, c)
				}
				// A 503 is retried by the SDK, which marks the attempt. A
				// GET whose reused connection was reset may instead be
				// resent by Go's HTTP transport, under the same attempt
				// number: only the wire shows it.
				if tc.fault == s3count.Fail503 && c.Retries[op] != 1 {
					t.Errorf("%s: %d requests marked as SDK retries, want 1", op, c.Retries[op])
				}
				if n := log.get(string(op)); n != 1 {
					t.Errorf("the store's own count of %s: %d, want 1 (one call)", op, n)
				}
			}
			t.Logf("on the wire: %s; the store's own count: create=%d get=%d", c, log.get("create"), log.get("get"))
		})
	}
}

// TestFailedAnswersCounted: a 5xx the server itself gives back (here: a
// fault on every attempt) counts every attempt as failed, and the error
// reaches the caller.
func TestFailedAnswersCounted(t *testing.T) {
	testenv.CheckLeaks(t)
	st, p, _ := storeVia(t, s3count.WithFaults(s3count.FailFirst(s3count.OpPut, 100, s3count.Fail503)))
	ctx := ctxFor(t)
	if _, err := st.Put(ctx, "x", []byte("x")); err == nil || !strings.Contains(err.Error(), "503") && !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("put against a failing server: %v, want an error", err)
	}
	c := p.Counts()
	if c.Requests[s3count.OpPut] != 3 || c.Failed[s3count.OpPut] != 3 || c.Retries[s3count.OpPut] != 2 {
		t.Fatalf("counts %s, want 3 attempts, all failed, 2 retries", c)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestDropReplyAppliesTheWrite: a request whose answer the proxy drops
// reached the server: the create fails for the caller, yet the object is
// there (and the SDK's retries of the create were refused as duplicates,
// their answers dropped as well).
func TestDropReplyAppliesTheWrite(t *testing.T) {
	testenv.CheckLeaks(t)
	st, p, _ := storeVia(t, s3count.WithFaults(s3count.FailFirst(s3count.OpCreate, 100, s3count.DropReply)))
	ctx := ctxFor(t)
	if _, err := st.Create(ctx, "lost-answer", []byte("x")); err == nil {
		t.Fatal("create with its answer dropped: no error")
	}
	obj, err := st.Get(ctx, "lost-answer")
	if err != nil || string(obj.Body) != "x" {
		t.Fatalf("the dropped create's object: %q, %v; want it written", obj.Body, err)
	}
	if c := p.Counts(); c.Requests[s3count.OpCreate] != 3 || c.Injected[s3count.OpCreate] != 3 || c.Answered(s3count.OpCreate, 0) != 3 {
		t.Fatalf("counts %s, want 3 creates, each answer dropped", c)
	}
}

// TestCountsConnections: the proxy counts the connections its clients
// open — one for a client that keeps it alive, one per request for a
// client that does not.
func TestCountsConnections(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer target.Close()
	p, err := s3count.New(target.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, keepAlive := range []bool{true, false} {
		before := p.Counts()
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: !keepAlive}}
		for range 5 {
			resp, err := c.Get(p.URL() + "/bucket/key")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		c.CloseIdleConnections()
		got := p.Counts().Sub(before)
		want := 1
		if !keepAlive {
			want = 5
		}
		if got.Connections != want || got.Total() != 5 {
			t.Fatalf("keep-alive %v: %d connections for %d requests, want %d for 5", keepAlive, got.Connections, got.Total(), want)
		}
	}
}
