package task

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

// s3Env is a Client on a fresh bucket of the shared VersityGW gateway,
// with the real S3 clock.
func s3Env(t *testing.T, shards int) (*Client, *fakeWaker) {
	t.Helper()
	gw := testenv.SharedS3(t)
	obj, err := s3store.New(gw.OwnClient(t), gw.Bucket(t), s3store.WithPrefix("tenure/"+testenv.Name(t, 40)+"/"))
	if err != nil {
		t.Fatalf("s3 store: %v", err)
	}
	w := &fakeWaker{}
	c, err := NewClient(NewStore(obj), ClientConfig{Shards: shards, Waker: w})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// TestS3Flow runs submit, get, claim, cancel, replay and wait against a
// real S3 server (VersityGW), with its clock.
func TestS3Flow(t *testing.T) {
	c, waker := s3Env(t, 8)
	ctx := testCtx(t)
	s := c.Store()

	tk, created, err := c.Submit(ctx, SubmitRequest{Type: "email", Entity: "user-1", Input: json.RawMessage(`{"n":1}`)})
	if err != nil || !created {
		t.Fatalf("Submit: %v created %v", err, created)
	}
	now, _ := s.Now(ctx)
	if d := now.Now.Sub(tk.CreatedAt); d < -5*time.Second || d > 5*time.Second {
		t.Fatalf("created at %s, server time %s: not the S3 clock", tk.CreatedAt, now.Now)
	}
	got, err := c.Get(ctx, tk.Ref())
	if err != nil || got.Rev != 1 || got.Status != Pending || string(got.Input) != `{"n":1}` {
		t.Fatalf("Get: %v %+v", err, got)
	}
	ps, _, err := s.ListPointers(ctx, tk.Shard, "", 0)
	if err != nil || len(ps) != 1 || ps[0].Key != tk.PointerKey() || ps[0].EntityKey != EntityKey("email", "user-1") {
		t.Fatalf("pointers: %v %+v", err, ps)
	}
	if w := waker.Calls(); len(w) != 1 || w[0].Key != tk.PointerKey() {
		t.Fatalf("wake-ups %+v", w)
	}

	// Claim; a stale writer loses on the real server's If-Match.
	run, etag, err := s.Load(ctx, tk.Shard, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	stale, staleEtag, _ := s.Load(ctx, tk.Shard, tk.ID)
	if err := run.ClaimFor(now.Now.Add(time.Second), runnerA); err != nil {
		t.Fatal(err)
	}
	if etag, err = s.Write(ctx, run, etag); err != nil {
		t.Fatalf("claim write: %v", err)
	}
	stale.ClaimFor(now.Now.Add(time.Second), runnerB)
	if _, err := s.Write(ctx, stale, staleEtag); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("stale claim write: %v, want storage.ErrPrecondition", err)
	}

	// Cancel while running, then the executor finishes the cancellation.
	cancelled, err := c.Cancel(ctx, tk.Ref())
	if err != nil || !cancelled.CancelRequested || cancelled.Status != Running {
		t.Fatalf("Cancel running: %v %+v", err, cancelled)
	}
	if _, err := s.Write(ctx, run, etag); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("write over the cancel request: %v, want storage.ErrPrecondition", err)
	}
	run, etag, _ = s.Load(ctx, tk.Shard, tk.ID)
	if err := run.FinishCancel(now.Now.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, run, etag); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePointer(ctx, tk.PointerKey()); err != nil {
		t.Fatal(err)
	}

	// Replay, then wait while an executor completes it.
	replayed, err := c.Replay(ctx, tk.Ref())
	if err != nil || replayed.Status != Pending || replayed.Attempt != 0 {
		t.Fatalf("Replay: %v %+v", err, replayed)
	}
	ps, _, _ = s.ListPointers(ctx, tk.Shard, "", 0)
	if len(ps) != 1 || ps[0].Key != replayed.PointerKey() {
		t.Fatalf("pointers after replay: %+v, want %s", ps, replayed.PointerKey())
	}
	done := make(chan error, 1)
	var final *Task
	go func() {
		var err error
		final, err = c.Wait(ctx, tk.Ref(), 50*time.Millisecond)
		done <- err
	}()
	run, etag, _ = s.Load(ctx, tk.Shard, tk.ID)
	now, _ = s.Now(ctx)
	if err := run.ClaimFor(now.Latest(), runnerB); err != nil {
		t.Fatal(err)
	}
	if etag, err = s.Write(ctx, run, etag); err != nil {
		t.Fatal(err)
	}
	run.Complete(now.Latest(), json.RawMessage(`"sent"`))
	if _, err := s.Write(ctx, run, etag); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || final.Status != Completed || string(final.Result) != `"sent"` || final.Attempt != 1 {
		t.Fatalf("Wait: %v %+v", err, final)
	}

	// A pending task cancelled at once loses its pointer.
	p, _, _ := c.Submit(ctx, SubmitRequest{Type: "email"})
	if got, err := c.Cancel(ctx, p.Ref()); err != nil || got.Status != Cancelled {
		t.Fatalf("Cancel pending: %v %+v", err, got)
	}
	if _, err := s.Objects().Head(ctx, p.PointerKey()); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("pointer of a cancelled task: %v", err)
	}

	// A corrupt object on the real server: reported, and failed in place.
	key := TaskKey(p.Shard, "broken")
	if _, err := s.Objects().Put(ctx, key, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	bad, badEtag, err := s.Load(ctx, p.Shard, "broken")
	if !errors.Is(err, ErrCorrupt) || bad == nil || bad.Corrupt != "{not json" {
		t.Fatalf("Load corrupt: %v %+v", err, bad)
	}
	if err := bad.MarkCorrupt(now.Now, err); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, bad, badEtag); err != nil {
		t.Fatal(err)
	}
}

// TestS3ConcurrentSubmits: 32 concurrent submits of one caller id against
// the real server create exactly one task, all get it back, and exactly
// its pointer remains.
func TestS3ConcurrentSubmits(t *testing.T) {
	c, waker := s3Env(t, 8)
	ctx := testCtx(t)
	const n = 32
	type result struct {
		t       *Task
		created bool
		err     error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tk, created, err := c.Submit(ctx, SubmitRequest{ID: "once", Type: "charge", Entity: "acct-9", Input: json.RawMessage(`{"cents":500}`)})
			results[i] = result{tk, created, err}
		}()
	}
	close(start)
	wg.Wait()
	createdN := 0
	var winner *Task
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("submit %d: %v", i, r.err)
		}
		if r.created {
			createdN++
			winner = r.t
		}
	}
	if createdN != 1 {
		t.Fatalf("%d submits created the task, want exactly 1", createdN)
	}
	for i, r := range results {
		if r.t.Ref() != winner.Ref() || !r.t.CreatedAt.Equal(winner.CreatedAt) || r.t.PointerKey() != winner.PointerKey() {
			t.Fatalf("submit %d returned %+v, want the created task %+v", i, r.t, winner)
		}
	}
	stored, err := c.Get(ctx, winner.Ref())
	if err != nil || stored.Rev != 1 {
		t.Fatalf("stored task: %v rev %d", err, stored.Rev)
	}
	var keys []string
	for o, err := range storage.Walk(ctx, c.Store().Objects(), ReadyPrefix, "", 0) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
	if len(keys) != 1 || keys[0] != winner.PointerKey() {
		t.Fatalf("pointers %q, want only %s", keys, winner.PointerKey())
	}
	if w := waker.Calls(); len(w) != 1 {
		t.Fatalf("%d wake-ups, want 1 (by the creator)", len(w))
	}
}

// TestS3Purge: against the real server and its clock, Purge deletes the
// finished tasks that finished before the cutoff (a failed one after
// marking it, through VersityGW's If-Match on PUT and on DELETE) and keeps a
// pending one and everything that finished after the cutoff.
func TestS3Purge(t *testing.T) {
	c, _ := s3Env(t, 1)
	ctx := testCtx(t)
	s := c.Store()
	finish := func(end func(*Task, time.Time)) *Task {
		t.Helper()
		tk, _, err := c.Submit(ctx, SubmitRequest{Type: "job"})
		if err != nil {
			t.Fatal(err)
		}
		run, etag, err := s.Load(ctx, tk.Shard, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		now, _ := s.Now(ctx)
		if err := run.ClaimFor(now.Latest(), runnerA); err != nil {
			t.Fatal(err)
		}
		if etag, err = s.Write(ctx, run, etag); err != nil {
			t.Fatal(err)
		}
		end(run, now.Latest())
		if _, err := s.Write(ctx, run, etag); err != nil {
			t.Fatal(err)
		}
		return run
	}
	completed := finish(func(tk *Task, now time.Time) { tk.Complete(now, nil) })
	failed := finish(func(tk *Task, now time.Time) { tk.Fail(now, errors.New("no"), true) })
	pending, _, err := c.Submit(ctx, SubmitRequest{Type: "job", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Everything so far finished before this cutoff (LastModified has a
	// one-second resolution); what finishes after it must stay.
	var cutoff time.Time
	testenv.WaitFor(t, "the S3 clock to pass the writes by a second", 10*time.Second, func() bool {
		now, err := s.Now(ctx)
		cutoff = now.Earliest()
		return err == nil && cutoff.After(failed.UpdatedAt.Add(1100*time.Millisecond))
	})
	late := finish(func(tk *Task, now time.Time) { tk.Complete(now, nil) })

	res, err := s.Purge(ctx, PurgeOptions{Shard: completed.Shard, Before: cutoff})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 1 || res.Failed != 1 || res.Active != 1 || res.Young != 1 || res.Scanned != 4 {
		t.Fatalf("Purge: %+v", res)
	}
	for _, tk := range []*Task{completed, failed} {
		if _, err := s.Objects().Head(ctx, tk.Key()); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("%s (%s) after the purge: %v", tk.Ref(), tk.Status, err)
		}
	}
	for _, tk := range []*Task{pending, late} {
		if _, err := s.Objects().Head(ctx, tk.Key()); err != nil {
			t.Fatalf("%s (%s) after the purge: %v", tk.Ref(), tk.Status, err)
		}
	}
}
