package storagetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv/poll"
	"github.com/tenurehq/tenure/storage"
)

// registerBare registers runner id; nothing renews its lease.
func registerBare(t *testing.T, s storage.RunnerStore, id string, ttl time.Duration) storage.Session {
	t.Helper()
	ss, err := s.Register(ctxT(t), runner(id), ttl)
	if err != nil {
		t.Fatalf("Register(%s): %v", id, err)
	}
	t.Cleanup(func() { ss.Close(context.Background()) })
	return ss
}

// keepAliveReport is one result KeepAliveLoop handed to its report func.
type keepAliveReport struct {
	res storage.KeepAliveResult
	err error
}

// keepAlive runs storage.KeepAliveLoop on ss with the default cadence until
// the test or the session ends. It returns the loop's results in order and
// a channel closed once the loop has returned.
func keepAlive(t *testing.T, ss storage.Session) (<-chan keepAliveReport, <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// Room for every result of a test's life, so that a test that stops
	// reading never holds up the keep-alives.
	results := make(chan keepAliveReport, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		storage.KeepAliveLoop(ctx, ss, storage.KeepAliveCadence{}, func(res storage.KeepAliveResult, err error) {
			select {
			case results <- keepAliveReport{res, err}:
			case <-ctx.Done():
			}
		})
	}()
	return results, done
}

// checkConfirmed fails unless res is a confirmation of ss's lease: sent no
// later than answered, and granted the session's TTL.
func checkConfirmed(t *testing.T, ss storage.Session, what string, res storage.KeepAliveResult) {
	t.Helper()
	if res.SentAt.IsZero() || res.AnsweredAt.Before(res.SentAt) || res.TTL != ss.TTL() {
		t.Fatalf("%s: %+v (want sent ≤ answered, TTL %s)", what, res, ss.TTL())
	}
}

func testKeepAliveReports(t *testing.T, h RunnerStoreHarness) {
	s := h.Open(t, h.Namespace(t))
	ss := registerBare(t, s, "healthy", shortTTL)
	checkConfirmed(t, ss, "the grant", ss.Granted())

	before := time.Now()
	res, err := ss.KeepAlive(ctxT(t))
	if err != nil {
		t.Fatalf("KeepAlive on a healthy store: %v", err)
	}
	checkConfirmed(t, ss, "one keep-alive", res)
	// The send time is read before sending: the answer's TTL runs from no
	// earlier than it.
	if res.SentAt.Before(before) || !res.SentAt.After(ss.Granted().SentAt) || res.AnsweredAt.After(time.Now()) {
		t.Fatalf("keep-alive sent %v, answered %v: not within the call (from %v)", res.SentAt, res.AnsweredAt, before)
	}

	// The loop reports every keep-alive, in order, on the default cadence.
	results, loopDone := keepAlive(t, ss)
	prev := ss.Granted()
	for i := 0; i < 2; i++ {
		r := recv(t, results, 2*ss.TTL(), "keep-alive result")
		if r.err != nil {
			t.Fatalf("keep-alive %d on a healthy store: %v", i, r.err)
		}
		checkConfirmed(t, ss, "a loop keep-alive", r.res)
		if !r.res.SentAt.After(prev.SentAt) {
			t.Fatalf("keep-alive %d did not advance: sent %v, then %v", i, prev.SentAt, r.res.SentAt)
		}
		if gap := r.res.SentAt.Sub(prev.SentAt); gap > ss.TTL() {
			t.Fatalf("keep-alives %s apart with TTL %s", gap, ss.TTL())
		}
		prev = r.res
	}

	// Orphan ends the loop and the session: nothing more is sent.
	ss.Orphan()
	waitClosed(t, loopDone, 5*time.Second, "the keep-alive loop to return after Orphan")
	select {
	case <-ss.Done():
	default:
		t.Fatal("Done not closed after Orphan")
	}
	_, err = ss.KeepAlive(ctxT(t))
	wantErr(t, err, storage.ErrSessionClosed, "KeepAlive after Orphan")
}

// waitClosed waits up to d for done to close.
func waitClosed(t *testing.T, done <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: not within %s", what, d)
	}
}

func testKeepAliveFailures(t *testing.T, h RunnerStoreHarness) {
	s := h.Open(t, h.Namespace(t))
	ss := registerBare(t, s, "flaky", longTTL)
	results, _ := keepAlive(t, ss)
	lastOK := ss.Granted()
	heal := h.Isolate(t, s)
	streak := 0
	waitForEvent(t, results, longTTL, "two consecutive keep-alive failures", func(r keepAliveReport) bool {
		if r.err == nil {
			lastOK, streak = r.res, 0 // a keep-alive that got through before the partition
			return false
		}
		if errors.Is(r.err, storage.ErrLeaseLost) || !errors.Is(r.err, storage.ErrUnavailable) || r.res.TTL != 0 || r.res.SentAt.IsZero() {
			t.Fatalf("failed keep-alive: %+v, %v (want ErrUnavailable, no TTL)", r.res, r.err)
		}
		streak++
		return streak >= 2
	})
	heal()
	waitForEvent(t, results, longTTL, "keep-alive recovery", func(r keepAliveReport) bool {
		if errors.Is(r.err, storage.ErrLeaseLost) {
			t.Fatalf("lease lost during a partition shorter than its TTL: %v", r.err)
		}
		if r.err != nil {
			return false
		}
		checkConfirmed(t, ss, "the recovering keep-alive", r.res)
		if !r.res.SentAt.After(lastOK.SentAt) {
			t.Fatalf("recovery sent %v, not after the last confirmed keep-alive %v", r.res.SentAt, lastOK.SentAt)
		}
		return true
	})
}

func testLeaseExpiry(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	watcher, crasher := h.Open(t, ns), h.Open(t, ns)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	runnersCh := runnerEvents(ctx, watcher)
	locksCh := watcher.WatchShardLocks(ctx)
	ss := registerBare(t, crasher, "crasher", shortTTL)
	last := ss.Granted() // the last confirmation; read once the loop has returned
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		storage.KeepAliveLoop(ctx, ss, storage.KeepAliveCadence{}, func(res storage.KeepAliveResult, err error) {
			if err == nil {
				last = res
			}
		})
	}()
	if res, err := ss.AcquireShards(ctx, shards("default", 0, 3)); err != nil || res[2].Status != storage.Acquired {
		t.Fatalf("AcquireShards: %+v, %v", res, err)
	}
	waitForEvent(t, runnersCh, 5*time.Second, "runner put", func(e storage.RunnerEvent) bool { return e.ID == "crasher" })
	for i := 0; i < 3; i++ {
		recv(t, locksCh, 5*time.Second, "lock put")
	}
	ss.Orphan() // a crash: no more keep-alives, no revoke
	crashedAt := time.Now()
	<-loopDone // every confirmation it had is reported
	// Expiry counts from the last renewal, which the server made no earlier
	// than the request left: a deadline counted from the send time is never
	// late.
	deadline := last.SentAt.Add(last.TTL)
	var runnerGone time.Time
	locksGone := 0
	var locksGoneAt time.Time
	timeout := time.After(last.TTL + 5*time.Second)
	for runnerGone.IsZero() || locksGone < 3 {
		select {
		case e := <-runnersCh:
			if e.Kind == storage.EventDelete && e.ID == "crasher" {
				runnerGone = time.Now()
			}
		case e := <-locksCh:
			if e.Kind == storage.EventDelete {
				locksGone++
				locksGoneAt = time.Now()
			}
		case <-timeout:
			t.Fatalf("after %s: runner deleted=%v, %d/3 locks deleted", last.TTL+5*time.Second, !runnerGone.IsZero(), locksGone)
		}
	}
	for what, at := range map[string]time.Time{"runner key": runnerGone, "locks": locksGoneAt} {
		if at.Before(deadline) {
			t.Errorf("%s deleted at %v, before the conservative deadline %v (last confirmation's send + TTL)", what, at, deadline)
		}
		if late := at.Sub(crashedAt); late > last.TTL+h.leaseSlack() {
			t.Errorf("%s deleted %s after the crash; want within TTL %s + %s", what, late, last.TTL, h.leaseSlack())
		}
	}
}

func testLeaseLostAfterRevoke(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	s := h.Open(t, ns)
	ss := registerBare(t, s, "revoked", shortTTL)
	results, loopDone := keepAlive(t, ss)
	ctx := ctxT(t)
	h.RevokeLease(t, ss.LeaseID())
	revokedAt := time.Now()
	waitForEvent(t, results, 2*ss.TTL(), "lease-lost result", func(r keepAliveReport) bool {
		if errors.Is(r.err, storage.ErrLeaseLost) {
			if r.res.TTL != 0 || r.res.SentAt.Before(revokedAt) {
				t.Fatalf("lease-lost result %+v (revoked at %v)", r.res, revokedAt)
			}
			return true
		}
		return false
	})
	// Detected by the next keep-alive: within one interval (≤ TTL/3 by
	// default) plus a call.
	if took := time.Since(revokedAt); took > ss.TTL() {
		t.Errorf("lease loss detected %s after the revoke; want within the TTL %s", took, ss.TTL())
	}
	select {
	case <-ss.Done():
	default:
		t.Fatal("Done not closed by the keep-alive that found the lease lost")
	}
	waitClosed(t, loopDone, 5*time.Second, "the keep-alive loop to end after the loss")
	if _, err := ss.KeepAlive(ctx); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("KeepAlive after lease loss: got %v, want ErrLeaseLost", err)
	}
	if _, err := ss.AcquireShards(ctx, shards("default", 0, 1)); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("AcquireShards after lease loss: got %v, want ErrLeaseLost", err)
	}
	list, _, err := s.Runners(ctx)
	if err != nil || len(list) != 0 {
		t.Fatalf("runner record after revoke: %+v, %v", list, err)
	}
}

// testKeepAliveAfterExpiry: a lease nobody renewed expires; the next
// KeepAlive reports it lost and ends the session.
func testKeepAliveAfterExpiry(t *testing.T, h RunnerStoreHarness) {
	s := h.Open(t, h.Namespace(t))
	ss := registerBare(t, s, "forgotten", shortTTL)
	ctx := ctxT(t)
	poll.For(t, "the unrenewed lease to expire", ss.TTL()+5*time.Second, func() bool {
		list, _, err := s.Runners(ctx)
		return err == nil && len(list) == 0
	})
	res, err := ss.KeepAlive(ctx)
	wantErr(t, err, storage.ErrLeaseLost, "KeepAlive of an expired lease")
	if res.TTL != 0 || res.SentAt.IsZero() {
		t.Fatalf("lease-lost result %+v", res)
	}
	select {
	case <-ss.Done():
	default:
		t.Fatal("Done not closed by the keep-alive that found the lease lost")
	}
}

// testLeaseTimeToLive: a live lease reports its grant and a time left that
// bounds its expiry from above (the lease of a crashed runner is gone no
// later than Remaining after the answer); a revoked one is not found.
func testLeaseTimeToLive(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	s, other := h.Open(t, ns), h.Open(t, ns)
	ss := registerBare(t, s, "ttl", longTTL)
	lt, err := other.LeaseTimeToLive(ctxT(t), ss.LeaseID())
	if err != nil {
		t.Fatalf("LeaseTimeToLive of a live lease: %v", err)
	}
	if lt.Granted != ss.TTL() || lt.Remaining <= 0 || lt.Remaining > ss.TTL()+h.leaseSlack() {
		t.Fatalf("LeaseTimeToLive = %+v, want granted %s and 0 < remaining ≤ %s", lt, ss.TTL(), ss.TTL()+h.leaseSlack())
	}

	// Orphaned, as by a crash: it expires within the bound it reports.
	crashed := registerBare(t, s, "crashed", shortTTL)
	crashed.Orphan()
	lt, err = other.LeaseTimeToLive(ctxT(t), crashed.LeaseID())
	if err != nil {
		t.Fatalf("LeaseTimeToLive of an orphaned lease: %v", err)
	}
	bound := time.Now().Add(lt.Remaining)
	poll.For(t, "the orphaned lease to expire", lt.Remaining+5*time.Second, func() bool {
		_, err := other.LeaseTimeToLive(ctxT(t), crashed.LeaseID())
		return errors.Is(err, storage.ErrNotFound)
	})
	// The backend's expiry runs on its own clock and timers: allow it the
	// slack of a loaded machine beyond the bound, but not a whole TTL.
	if late := time.Since(bound); late > shortTTL {
		t.Errorf("the lease outlived its reported bound by %s", late)
	}

	if err := ss.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.LeaseTimeToLive(ctxT(t), ss.LeaseID()); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("LeaseTimeToLive of a revoked lease: err = %v, want ErrNotFound", err)
	}
}
