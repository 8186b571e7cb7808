package detachment

// This file is past the ~500-line mark on purpose: it is the detachment
// machine's specification as tests, one per rule (deadline, margin,
// failure streak, grace, recovery window, reattach, explicit detach), read
// top to bottom beside machine.go's transition list; every test drives the
// same injected clock and machine, so a split would cut the rules apart
// without making any file simpler.

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestStartingState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		r := record(m)
		wantDetached(t, m, ReasonStarting)
		if s := m.State(); s.Generation != 0 || !s.WouldDetach || s.WouldReason != ReasonStarting {
			t.Fatalf("starting state = %+v", s)
		}
		// A failure before the first success does not require a window.
		m.KeepAliveFailed(1, errKA)
		wantDetached(t, m, ReasonStarting)
		m.KeepAliveOK(1, time.Now(), ttl)
		wantAttached(t, m, true)
		ctx, gen, _ := m.Attachment()
		if gen != 1 || ctx.Err() != nil {
			t.Fatalf("generation %d, ctx err %v; want 1, live", gen, ctx.Err())
		}
		wantKinds(t, r, "attached")
		if tr := r.last(t); tr.Generation != 1 || tr.Reason != ReasonStarting || tr.LeaseID != 1 || tr.Mode != ModeEnforce {
			t.Fatalf("attach transition = %+v", tr)
		}
	})
}

func TestDetachExactlyAtDeadlineMinusMargin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		r := record(m)
		var calledAt time.Time
		m.Subscribe(func(tr Transition) {
			if tr.Kind == Detached {
				calledAt = time.Now()
			}
		})
		attachNow(t, m, 1)
		// Keep-alives every ttl/3 keep it attached well past one TTL.
		for range 5 {
			time.Sleep(3 * time.Second)
			m.KeepAliveOK(1, time.Now(), ttl)
			wantAttached(t, m, true)
		}
		last := time.Now()
		deadline := last.Add(ttl)
		cutoff := deadline.Add(-3 * time.Second)
		if s := m.State(); !s.Deadline.Equal(deadline) || !s.DetachAt.Equal(cutoff) {
			t.Fatalf("deadline %v detachAt %v, want %v %v", s.Deadline, s.DetachAt, deadline, cutoff)
		}
		ctx, _, _ := m.Attachment()

		time.Sleep(cutoff.Sub(last) - time.Nanosecond)
		synctest.Wait()
		wantAttached(t, m, true)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantDetached(t, m, ReasonLeaseDeadline)
		if ctx.Err() == nil {
			t.Fatal("attachment context not cancelled")
		}
		tr := r.last(t)
		if tr.Kind != Detached || tr.Reason != ReasonLeaseDeadline || !tr.At.Equal(cutoff) || !calledAt.Equal(cutoff) {
			t.Fatalf("transition %+v told at %v; want detached at %v", tr, calledAt, cutoff)
		}
		if !tr.Deadline.Equal(deadline) || tr.Generation != 1 || tr.LeaseID != 1 {
			t.Fatalf("transition %+v lacks deadline/generation/lease", tr)
		}
		if s := m.State(); !s.Since.Equal(cutoff) {
			t.Fatalf("since = %v, want %v", s.Since, cutoff)
		}
		wantKinds(t, r, "attached detached:lease-deadline")
	})
}

func TestDeadlineUsesSendTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		r := record(m)
		attachNow(t, m, 1)
		// A keep-alive sent at t0 whose response takes 2s.
		t0 := time.Now()
		time.Sleep(2 * time.Second)
		m.KeepAliveOK(1, t0, ttl)
		if got := m.State().Deadline; !got.Equal(t0.Add(ttl)) {
			t.Fatalf("deadline = %v, want send time + ttl = %v (receive time would give %v)", got, t0.Add(ttl), time.Now().Add(ttl))
		}
		// An older keep-alive answered later cannot move the deadline back.
		m.KeepAliveOK(1, t0.Add(-time.Second), ttl)
		if got := m.State().Deadline; !got.Equal(t0.Add(ttl)) {
			t.Fatalf("deadline moved back to %v", got)
		}
		// The detach follows the send-time deadline: t0+6s, 4s after the
		// response.
		time.Sleep(4 * time.Second)
		synctest.Wait()
		wantDetached(t, m, ReasonLeaseDeadline)
		if at := r.last(t).At; !at.Equal(t0.Add(6 * time.Second)) {
			t.Fatalf("detached at %v, want %v", at, t0.Add(6*time.Second))
		}
	})
}

func TestStaleKeepAliveNeitherExtendsNorAttaches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		r := record(m)
		// Sent 6s ago with a 9s TTL: deadline - margin is now.
		m.KeepAliveOK(1, time.Now().Add(-6*time.Second), ttl)
		wantDetached(t, m, ReasonStarting)
		attachNow(t, m, 1)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		wantDetached(t, m, ReasonLeaseDeadline)
		before := m.State().Deadline
		// Later than the current deadline, but already past its cutoff.
		m.KeepAliveOK(1, time.Now().Add(-7*time.Second), ttl)
		s := m.State()
		if !s.Deadline.Equal(before) || !s.HealthySince.IsZero() {
			t.Fatalf("stale keep-alive moved deadline %v→%v or opened the window (%v)", before, s.Deadline, s.HealthySince)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		wantDetached(t, m, ReasonLeaseDeadline)
		wantKinds(t, r, "attached detached:lease-deadline")
	})
}

func TestKeepAliveFailureStreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		r := record(m)
		attachNow(t, m, 1)
		m.KeepAliveFailed(1, errKA)
		wantAttached(t, m, true)
		// A success resets the streak: failures must be consecutive.
		m.KeepAliveOK(1, time.Now(), ttl)
		if s := m.State(); s.Streak != 0 {
			t.Fatalf("streak after success = %d", s.Streak)
		}
		m.KeepAliveFailed(1, errKA)
		wantAttached(t, m, true)
		if s := m.State(); s.Streak != 1 {
			t.Fatalf("streak = %d, want 1", s.Streak)
		}
		at := time.Now()
		m.KeepAliveFailed(1, errKA)
		wantDetached(t, m, ReasonKeepAliveFailures)
		tr := r.last(t)
		if tr.Kind != Detached || !tr.At.Equal(at) || tr.Streak != 2 || !errors.Is(tr.Err, errKA) {
			t.Fatalf("transition = %+v", tr)
		}
		ctx, _, _ := m.Attachment()
		if !errors.Is(context.Cause(ctx), errKA) {
			t.Fatalf("cause %v does not wrap the keep-alive error", context.Cause(ctx))
		}
	})
}

func TestStorageErrorGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		r := record(m)
		attachNow(t, m, 1)

		// Answered inside the grace: nothing happens.
		m.StorageError(errStorage)
		if s := m.State(); s.StorageErrorSince.IsZero() {
			t.Fatal("grace not pending after a storage error")
		}
		time.Sleep(900 * time.Millisecond)
		m.StorageOK()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		wantAttached(t, m, true)

		// Unanswered: detach exactly at the end of the grace, which a
		// second error does not restart.
		m.KeepAliveOK(1, time.Now(), ttl)
		start := time.Now()
		m.StorageError(errStorage)
		time.Sleep(500 * time.Millisecond)
		m.StorageError(errors.New("another"))
		time.Sleep(500*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		wantAttached(t, m, true)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantDetached(t, m, ReasonStorageError)
		tr := r.last(t)
		if !tr.At.Equal(start.Add(time.Second)) || !errors.Is(tr.Err, errStorage) {
			t.Fatalf("transition = %+v, want at %v with the first error", tr, start.Add(time.Second))
		}
		wantKinds(t, r, "attached detached:storage-error")
	})
}

func TestLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		r := record(m)
		attachNow(t, m, 1)
		at := time.Now()
		m.LeaseLost(1)
		wantDetached(t, m, ReasonLeaseLost)
		if tr := r.last(t); !tr.At.Equal(at) {
			t.Fatalf("detached at %v, want at once (%v)", tr.At, at)
		}
		// The lost lease cannot come back, however healthy it looks.
		for range 3 {
			m.KeepAliveOK(1, time.Now(), ttl)
			m.StorageOK()
			if s := m.State(); !s.HealthySince.IsZero() {
				t.Fatalf("recovery window opened on a lost lease: %+v", s)
			}
			time.Sleep(3 * time.Second)
			synctest.Wait()
			wantDetached(t, m, ReasonLeaseLost)
		}
		// A new lease opens the recovery window.
		t2 := time.Now()
		m.KeepAliveOK(2, t2, ttl)
		if s := m.State(); !s.HealthySince.Equal(t2) || s.LeaseID != 2 || !s.Deadline.Equal(t2.Add(ttl)) {
			t.Fatalf("state after new lease = %+v", s)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		wantAttached(t, m, true)
		tr := r.last(t)
		if tr.Kind != Attached || tr.Generation != 2 || tr.LeaseID != 2 || !tr.At.Equal(t2.Add(2*time.Second)) || tr.Reason != ReasonLeaseLost {
			t.Fatalf("attach transition = %+v", tr)
		}
		// A late result of the retired lease changes nothing.
		m.KeepAliveFailed(1, errKA)
		m.KeepAliveFailed(1, errKA)
		m.LeaseLost(1)
		wantAttached(t, m, true)
		// etcd reports a vanished lease as a TTL ≤ 0.
		m.KeepAliveOK(2, time.Now(), 0)
		wantDetached(t, m, ReasonLeaseLost)
		wantKinds(t, r, "attached detached:lease-lost attached detached:lease-lost")
	})
}

func TestRecoveryWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		r := record(m)
		attachNow(t, m, 1)
		oldCtx, _, _ := m.Attachment()
		m.KeepAliveFailed(1, errKA)
		m.KeepAliveFailed(1, errKA)
		wantDetached(t, m, ReasonKeepAliveFailures)

		time.Sleep(500 * time.Millisecond)
		t1 := time.Now()
		m.KeepAliveOK(1, t1, ttl)
		if s := m.State(); !s.HealthySince.Equal(t1) {
			t.Fatalf("window start = %v, want %v", s.HealthySince, t1)
		}
		time.Sleep(2*time.Second - time.Nanosecond)
		synctest.Wait()
		wantDetached(t, m, ReasonKeepAliveFailures)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantAttached(t, m, true)
		tr := r.last(t)
		if tr.Kind != Attached || !tr.At.Equal(t1.Add(2*time.Second)) || tr.Generation != 2 || tr.Reason != ReasonKeepAliveFailures {
			t.Fatalf("attach transition = %+v", tr)
		}
		ctx, gen, _ := m.Attachment()
		if gen != 2 || ctx == oldCtx || oldCtx.Err() == nil || ctx.Err() != nil {
			t.Fatal("re-attach must give a new live context and leave the old one cancelled")
		}
	})
}

func TestRecoveryWindowResetByFailure(t *testing.T) {
	failures := map[string]func(m *Machine){
		"keepalive-failed": func(m *Machine) { m.KeepAliveFailed(1, errKA) },
		"storage-error":    func(m *Machine) { m.StorageError(errStorage) },
		"lease-lost":       func(m *Machine) { m.LeaseLost(1) },
	}
	for name, fail := range failures {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMachine(t, DefaultConfig(ttl))
				attachNow(t, m, 1)
				m.KeepAliveFailed(1, errKA)
				m.KeepAliveFailed(1, errKA)
				wantDetached(t, m, ReasonKeepAliveFailures)
				m.KeepAliveOK(1, time.Now(), ttl)
				time.Sleep(time.Second)
				fail(m) // in the middle of the window
				if s := m.State(); !s.HealthySince.IsZero() {
					t.Fatalf("window still open after %s: %+v", name, s)
				}
				time.Sleep(3 * time.Second)
				synctest.Wait()
				wantAttached(t, m, false)
				// The window restarts from the next healthy signal.
				lease := int64(1)
				if name == "lease-lost" {
					lease = 2
				}
				t2 := time.Now()
				m.KeepAliveOK(lease, t2, ttl)
				m.StorageOK() // answers the storage error; a healthy signal
				time.Sleep(2*time.Second - time.Nanosecond)
				synctest.Wait()
				wantAttached(t, m, false)
				time.Sleep(time.Nanosecond)
				synctest.Wait()
				wantAttached(t, m, true)
			})
		})
	}
}

func TestReattachRefusedNearDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		attachNow(t, m, 1)
		m.KeepAliveFailed(1, errKA)
		m.KeepAliveFailed(1, errKA)
		wantDetached(t, m, ReasonKeepAliveFailures)
		time.Sleep(6 * time.Second) // past the first keep-alive's cutoff
		// Sent 4s ago: deadline now+5s, cutoff now+2s. The window opens,
		// but at its end deadline - now = 3s ≤ margin 3s.
		t1 := time.Now()
		m.KeepAliveOK(1, t1.Add(-4*time.Second), ttl)
		if got := m.State().Deadline; !got.Equal(t1.Add(5 * time.Second)) {
			t.Fatalf("deadline = %v, want %v", got, t1.Add(5*time.Second))
		}
		if m.State().HealthySince.IsZero() {
			t.Fatal("window not opened by a keep-alive still before its cutoff")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		wantDetached(t, m, ReasonKeepAliveFailures)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		wantDetached(t, m, ReasonKeepAliveFailures)
		// The window has elapsed without failure: a fresh keep-alive
		// attaches at once.
		m.KeepAliveOK(1, time.Now(), ttl)
		wantAttached(t, m, true)
	})
}

func TestReattachWaitsForPendingStorageError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		attachNow(t, m, 1)
		m.LeaseLost(1)
		m.StorageError(errStorage)
		m.KeepAliveOK(2, time.Now(), ttl) // opens the window; grace pending
		time.Sleep(900 * time.Millisecond)
		m.StorageOK() // window open since the keep-alive, grace cancelled
		time.Sleep(1100 * time.Millisecond)
		synctest.Wait()
		wantAttached(t, m, true)

		// A grace longer than the window, still pending at the window's end:
		// the success that answers it attaches at once.
		cfg := DefaultConfig(ttl)
		cfg.StorageErrorGrace = 5 * time.Second
		if err := m.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		m.LeaseLost(2)
		m.StorageError(errStorage)
		m.KeepAliveOK(3, time.Now(), ttl)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		wantAttached(t, m, false)
		m.StorageOK()
		wantAttached(t, m, true)
	})
}

func TestExplicitDetach(t *testing.T) {
	for _, mode := range []Mode{ModeEnforce, ModeObserve, ModeOff} {
		t.Run(string(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMachine(t, modeConfig(mode))
				r := record(m)
				told := false
				m.Subscribe(func(tr Transition) {
					if tr.Kind == Detached {
						told = true
					}
				})
				attachNow(t, m, 1)
				ctx, _, _ := m.Attachment()
				m.Detach(ReasonExplicit)
				if ctx.Err() == nil || !told {
					t.Fatalf("Detach returned with ctx err %v, subscribers told %v", ctx.Err(), told)
				}
				wantDetached(t, m, ReasonExplicit)
				// It recovers through the window, in every mode.
				m.KeepAliveOK(1, time.Now(), ttl)
				time.Sleep(2 * time.Second)
				synctest.Wait()
				wantAttached(t, m, true)

				ctx, _, _ = m.Attachment()
				m.Detach(ReasonStopped)
				if ctx.Err() == nil {
					t.Fatal("Detach(stopped) returned before cancelling")
				}
				wantDetached(t, m, ReasonStopped)
				if !m.State().Stopped {
					t.Fatal("state not stopped")
				}
				// Final: nothing re-attaches, not even a mode switch.
				m.KeepAliveOK(1, time.Now(), ttl)
				m.KeepAliveOK(7, time.Now(), ttl)
				m.StorageOK()
				if err := m.SetConfig(modeConfig(ModeOff)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				wantDetached(t, m, ReasonStopped)
				wantKinds(t, r, "attached detached:explicit attached detached:stopped")
				m.Close()
				m.Detach("")
				wantKinds(t, r, "attached detached:explicit attached detached:stopped")
			})
		})
	}
}

func TestDetachWaitsForEarlierDeliveries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		release := make(chan struct{})
		m.Subscribe(func(tr Transition) {
			if tr.Reason == ReasonLeaseDeadline {
				<-release // hold the timer's delivery
			}
		})
		attachNow(t, m, 1)
		time.Sleep(6 * time.Second) // the cutoff timer detaches and blocks
		synctest.Wait()
		wantDetached(t, m, ReasonLeaseDeadline)
		returned := make(chan struct{})
		go func() {
			m.Detach(ReasonStopped)
			close(returned)
		}()
		synctest.Wait()
		select {
		case <-returned:
			t.Fatal("Detach returned before an earlier detach was delivered")
		default:
		}
		close(release)
		synctest.Wait()
		select {
		case <-returned:
		default:
			t.Fatal("Detach did not return after the delivery")
		}
	})
}

func TestCloseStopsTimers(t *testing.T) {
	t.Run("fake-clock", func(t *testing.T) {
		clk := newFakeClock()
		m := newMachine(t, DefaultConfig(ttl), WithClock(clk))
		r := record(m)
		attachNow(t, m, 1)
		m.StorageError(errStorage)
		m.KeepAliveFailed(1, errKA)
		m.KeepAliveFailed(1, errKA)
		m.KeepAliveOK(1, clk.Now(), ttl) // recovery window armed
		m.StorageError(errStorage)       // grace armed
		if clk.Pending() == 0 {
			t.Fatal("expected armed timers before Close")
		}
		m.Close()
		if n := clk.Pending(); n != 0 {
			t.Fatalf("%d timers still armed after Close", n)
		}
		clk.Advance(time.Hour)
		wantKinds(t, r, "attached detached:keepalive-failures")
		wantDetached(t, m, ReasonStopped)
	})
	t.Run("synctest", func(t *testing.T) {
		// The bubble only exits if no goroutine is left behind.
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t, DefaultConfig(ttl))
			r := record(m)
			attachNow(t, m, 1)
			m.StorageError(errStorage)
			m.Close()
			time.Sleep(time.Hour)
			synctest.Wait()
			wantKinds(t, r, "attached detached:stopped")
		})
	})
}

func TestOddInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		m.Subscribe(nil)()
		m.KeepAliveOK(1, time.Time{}, ttl) // zero send time: long past
		wantDetached(t, m, ReasonStarting)
		m.KeepAliveOK(1, time.Now(), -time.Second) // negative TTL: gone
		wantDetached(t, m, ReasonStarting)
		m.KeepAliveOK(1, time.Now(), ttl) // lease 1 is retired
		wantDetached(t, m, ReasonStarting)
		m.KeepAliveFailed(2, nil)
		m.StorageError(nil)
		m.StorageOK()
		// A send time in the future counts as now.
		m.KeepAliveOK(2, time.Now().Add(time.Hour), ttl)
		wantAttached(t, m, true)
		if got, want := m.State().Deadline, time.Now().Add(ttl); !got.Equal(want) {
			t.Fatalf("deadline = %v, want %v", got, want)
		}
		// A loss report for a lease never seen is taken seriously.
		m.LeaseLost(99)
		wantDetached(t, m, ReasonLeaseLost)
		m.Detach("")
		m.Close()
		m.Close()
	})
}

func TestSubscriberMayReadMachine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		var seen []bool
		m.Subscribe(func(tr Transition) {
			ctx, gen, attached := m.Attachment()
			s := m.State()
			if gen != tr.Generation || attached != (tr.Kind == Attached) || s.Attached != attached {
				t.Errorf("subscriber saw %v gen %d attached %v for %+v", s, gen, attached, tr)
			}
			seen = append(seen, ctx.Err() == nil)
		})
		attachNow(t, m, 1)
		m.LeaseLost(1)
		if len(seen) != 2 || !seen[0] || seen[1] {
			t.Fatalf("context live per transition = %v, want [true false]", seen)
		}
	})
}
