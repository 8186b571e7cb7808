package storagetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
)

func testHealthStream(t *testing.T, h RunnerStoreHarness) {
	s := h.Open(t, h.Namespace(t))
	ss := register(t, s, "healthy", shortTTL)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch := ss.Health(ctx)
	first := recv(t, ch, time.Second, "current health on subscribe")
	if !first.OK || first.LeaseID != ss.LeaseID() || first.TTL != ss.TTL() || !first.Deadline.Equal(first.SentAt.Add(first.TTL)) {
		t.Fatalf("initial health %+v", first)
	}
	prev := first
	for i := 0; i < 2; i++ {
		h := recv(t, ch, 2*ss.TTL(), "keep-alive observation")
		if !h.OK || h.Streak != 0 || h.Err != nil {
			t.Fatalf("keep-alive %d on a healthy store: %+v", i, h)
		}
		if !h.SentAt.After(prev.SentAt) || !h.Deadline.After(prev.Deadline) {
			t.Fatalf("keep-alive %d did not advance: sent %v→%v, deadline %v→%v", i, prev.SentAt, h.SentAt, prev.Deadline, h.Deadline)
		}
		// The deadline counts from the send time, never the receive time.
		if !h.Deadline.Equal(h.SentAt.Add(h.TTL)) {
			t.Fatalf("deadline %v is not sent %v + ttl %s", h.Deadline, h.SentAt, h.TTL)
		}
		if h.SentAt.Sub(prev.SentAt) > ss.TTL() {
			t.Fatalf("keep-alives %s apart with TTL %s", h.SentAt.Sub(prev.SentAt), ss.TTL())
		}
		prev = h
	}
	if last := ss.LastHealth(); last.SentAt.Before(prev.SentAt) {
		t.Fatalf("LastHealth %+v older than the last published %+v", last, prev)
	}
	// A cancelled subscription's channel closes.
	cancel()
	waitFor(t, "health channel to close after its context ends", 5*time.Second, func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	})
}

func testKeepAliveFailures(t *testing.T, h RunnerStoreHarness) {
	s := h.Open(t, h.Namespace(t))
	ss := register(t, s, "flaky", longTTL)
	ctx := ctxT(t)
	ch := ss.Health(ctx)
	before := recv(t, ch, time.Second, "current health")
	heal := h.Isolate(t, s)
	var fail storage.LeaseHealth
	waitForEvent(t, ch, longTTL, "two consecutive keep-alive failures", func(h storage.LeaseHealth) bool {
		if h.OK {
			before = h // a keep-alive that got through before the partition
			return false
		}
		if h.Err == nil || h.LeaseLost || !h.Deadline.Equal(before.Deadline) {
			t.Fatalf("failure observation %+v (deadline before %v)", h, before.Deadline)
		}
		fail = h
		return h.Streak >= 2
	})
	if fail.Failures < 2 || !errors.Is(fail.Err, storage.ErrUnavailable) {
		t.Fatalf("failure observation %+v", fail)
	}
	heal()
	waitForEvent(t, ch, longTTL, "keep-alive recovery", func(h storage.LeaseHealth) bool {
		if h.LeaseLost {
			t.Fatalf("lease lost during a partition shorter than its TTL: %+v", h)
		}
		if !h.OK {
			return false
		}
		if h.Streak != 0 || !h.Deadline.After(before.Deadline) || h.Failures < fail.Failures {
			t.Fatalf("recovery observation %+v", h)
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
	ss := register(t, crasher, "crasher", shortTTL)
	if res, err := ss.AcquireShards(ctx, shards("default", 0, 3)); err != nil || res[2].Status != storage.Acquired {
		t.Fatalf("AcquireShards: %+v, %v", res, err)
	}
	waitForEvent(t, runnersCh, 5*time.Second, "runner put", func(e storage.RunnerEvent) bool { return e.ID == "crasher" })
	for i := 0; i < 3; i++ {
		recv(t, locksCh, 5*time.Second, "lock put")
	}
	ss.Orphan() // a crash: no more keep-alives, no revoke
	crashedAt := time.Now()
	last := ss.LastHealth()
	var runnerGone time.Time
	locksGone := 0
	var locksGoneAt time.Time
	deadline := time.After(last.TTL + 5*time.Second)
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
		case <-deadline:
			t.Fatalf("after %s: runner deleted=%v, %d/3 locks deleted", last.TTL+5*time.Second, !runnerGone.IsZero(), locksGone)
		}
	}
	// Expiry counts from the last renewal, which the server made no earlier
	// than the request left: the reported deadline is never late.
	for what, at := range map[string]time.Time{"runner key": runnerGone, "locks": locksGoneAt} {
		if at.Before(last.Deadline) {
			t.Errorf("%s deleted at %v, before the reported conservative deadline %v", what, at, last.Deadline)
		}
		if late := at.Sub(crashedAt); late > last.TTL+time.Second {
			t.Errorf("%s deleted %s after the crash; want within TTL %s + 1s", what, late, last.TTL)
		}
	}
}

func testLeaseLostAfterRevoke(t *testing.T, h RunnerStoreHarness) {
	ns := h.Namespace(t)
	s := h.Open(t, ns)
	ss := register(t, s, "revoked", shortTTL)
	ctx := ctxT(t)
	ch := ss.Health(ctx)
	h.RevokeLease(t, ss.LeaseID())
	revokedAt := time.Now()
	waitForEvent(t, ch, 2*ss.TTL(), "lease-lost observation", func(h storage.LeaseHealth) bool {
		if h.LeaseLost {
			if h.OK || !errors.Is(h.Err, storage.ErrLeaseLost) {
				t.Fatalf("lease-lost observation %+v", h)
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
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after lease loss")
	}
	if _, err := ss.AcquireShards(ctx, shards("default", 0, 1)); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("AcquireShards after lease loss: got %v, want ErrLeaseLost", err)
	}
	list, _, err := s.Runners(ctx)
	if err != nil || len(list) != 0 {
		t.Fatalf("runner record after revoke: %+v, %v", list, err)
	}
}
