package entity

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

// sizedPut is one PUT as it crossed the wire.
type sizedPut struct {
	path    string
	ifMatch bool
	body    int64 // Content-Length
	header  int   // the request line and headers, in bytes
}

// putRecorder is a reverse proxy in front of S3 that records the PUTs.
type putRecorder struct {
	mu   sync.Mutex
	puts []sizedPut
}

func (p *putRecorder) all() []sizedPut {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sizedPut(nil), p.puts...)
}

// TestRenewalWireCost measures what a long task's claim renewals cost on
// the wire: each is one PUT of the whole task object, If-Match on the last
// ETag, every TaskLease/3. It logs the bytes (the figure in
// docs/architecture.md) and fails if renewals stop being conditional
// whole-object PUTs of the size of the object.
func TestRenewalWireCost(t *testing.T) {
	e := newEnv(t, 1)
	s3 := testenv.SharedS3(t)
	target, err := url.Parse(s3.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	rec := &putRecorder{}
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			var hb strings.Builder
			_ = r.Header.Write(&hb)
			rec.mu.Lock()
			rec.puts = append(rec.puts, sizedPut{path: r.URL.Path, ifMatch: r.Header.Get("If-Match") != "",
				body: r.ContentLength, header: len(r.Method) + len(r.URL.RequestURI()) + len(" HTTP/1.1\r\n") + hb.Len() + len("Host: \r\n\r\n") + len(r.Host)})
			rec.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ak, sk := s3.Credentials()
	e.wrap = func(string, storage.ObjectStore) storage.ObjectStore {
		obj, err := s3store.New(testenv.NewS3Client(srv.URL, s3.Region(), ak, sk), e.S3.Bucket, s3store.WithPrefix("tenure/test/"))
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	e.start("renewer", e.standard)
	e.waitOwned(10 * time.Second)
	runFor := e.ecfg.TaskLease + e.ecfg.TaskLease/2 // about four renewals
	tk := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{MS: int(runFor / time.Millisecond)})})
	done := e.final(tk.Ref(), 30*time.Second)
	if done.Status != task.Completed {
		t.Fatalf("task ended %s", done.Status)
	}
	obj, err := e.tasks.Objects().Get(ctxFor(t, 10*time.Second), tk.Key())
	if err != nil {
		t.Fatal(err)
	}
	var writes []sizedPut
	for _, p := range rec.all() {
		if strings.HasSuffix(p.path, "/"+tk.Key()) {
			writes = append(writes, p)
		}
	}
	// The claim, the renewals, the commit.
	if len(writes) < 4 {
		t.Fatalf("%d PUTs of the task object, want the claim, ≥ 2 renewals and the commit: %+v", len(writes), writes)
	}
	renewals := writes[1 : len(writes)-1]
	var body, header int64
	for _, r := range renewals {
		if !r.ifMatch {
			t.Fatalf("a renewal PUT without If-Match: %+v", r)
		}
		body += r.body
		header += int64(r.header)
	}
	n := int64(len(renewals))
	t.Logf("%d renewals in %s (task lease %s): per renewal PUT %d body bytes + ~%d bytes of request line and headers; the completed object is %d bytes",
		n, runFor, e.ecfg.TaskLease, body/n, header/n, len(obj.Body))
	if avg := body / n; avg < int64(len(obj.Body))/2 || avg > 2*int64(len(obj.Body)) {
		t.Fatalf("renewal bodies of %d bytes on average, want about the whole object (%d bytes)", avg, len(obj.Body))
	}
}
