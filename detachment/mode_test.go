package detachment

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestModesSameDecisions drives enforce, observe and off machines with the
// same inputs: observe reports exactly enforce's transitions as
// WouldDetach/WouldAttach without ever interrupting; off reports nothing
// and never detaches; all three keep the same decision.
func TestModesSameDecisions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		modes := []Mode{ModeEnforce, ModeObserve, ModeOff}
		ms := make([]*Machine, len(modes))
		rs := make([]*recorder, len(modes))
		for i, mode := range modes {
			ms[i] = newMachine(t, modeConfig(mode))
			rs[i] = record(ms[i])
		}
		enf, obs, off := ms[0], ms[1], ms[2]
		step := func(f func(m *Machine), sleep time.Duration) {
			t.Helper()
			for _, m := range ms {
				f(m)
			}
			time.Sleep(sleep)
			synctest.Wait()
			e, o, fs := enf.State(), obs.State(), off.State()
			for _, s := range []State{o, fs} {
				if s.WouldDetach != e.WouldDetach || s.WouldReason != e.WouldReason || !s.Deadline.Equal(e.Deadline) || s.Streak != e.Streak || !s.HealthySince.Equal(e.HealthySince) {
					t.Fatalf("decisions differ:\nenforce %+v\nother   %+v", e, s)
				}
			}
			if e.WouldDetach == e.Attached {
				t.Fatalf("enforce attachment does not follow its decision: %+v", e)
			}
			wantAttached(t, obs, true)
			wantAttached(t, off, true)
		}
		ok := func(lease int64) func(*Machine) {
			return func(m *Machine) { m.KeepAliveOK(lease, time.Now(), ttl) }
		}
		step(ok(1), 0)
		obsCtx, _, _ := obs.Attachment()
		offCtx, _, _ := off.Attachment()
		step(func(*Machine) {}, 6*time.Second) // lease deadline
		step(ok(1), 2*time.Second)             // recovery window
		step(func(m *Machine) { m.KeepAliveFailed(1, errKA) }, 0)
		step(func(m *Machine) { m.KeepAliveFailed(1, errKA) }, 0)
		step(ok(1), 2*time.Second)
		step(func(m *Machine) { m.StorageError(errStorage) }, time.Second)
		step(func(m *Machine) { m.StorageOK(); m.KeepAliveOK(1, time.Now(), ttl) }, 2*time.Second)
		step(func(m *Machine) { m.LeaseLost(1) }, 0)
		step(ok(2), 2*time.Second)

		const want = "attached detached:lease-deadline attached detached:keepalive-failures attached detached:storage-error attached detached:lease-lost attached"
		wantKinds(t, rs[0], want)
		got := strings.NewReplacer("would-detach", "detached", "would-attach", "attached").Replace(rs[1].kinds())
		if got != want {
			t.Fatalf("observe reported\n %q\nenforce did\n %q", rs[1].kinds(), want)
		}
		e, o := rs[0].all(), rs[1].all()
		for i := range e {
			if !e[i].At.Equal(o[i].At) || e[i].Reason != o[i].Reason || o[i].Mode != ModeObserve {
				t.Fatalf("transition %d: enforce %+v observe %+v", i, e[i], o[i])
			}
			if i > 0 && o[i].Generation != 1 {
				t.Fatalf("observe changed generation: %+v", o[i])
			}
		}
		wantKinds(t, rs[2], "attached")
		if obsCtx.Err() != nil || offCtx.Err() != nil {
			t.Fatal("observe or off cancelled its attachment context")
		}
	})
}

func TestSetConfigModeSwitches(t *testing.T) {
	t.Run("enforce-to-observe-reattaches", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t, DefaultConfig(ttl))
			r := record(m)
			attachNow(t, m, 1)
			m.KeepAliveFailed(1, errKA)
			m.KeepAliveFailed(1, errKA)
			wantDetached(t, m, ReasonKeepAliveFailures)
			if err := m.SetConfig(modeConfig(ModeObserve)); err != nil {
				t.Fatal(err)
			}
			wantAttached(t, m, true)
			if s := m.State(); s.Generation != 2 || !s.WouldDetach || s.WouldReason != ReasonKeepAliveFailures {
				t.Fatalf("state = %+v", s)
			}
			// And back: enforce acts on the shadow's detachment at once.
			ctx, _, _ := m.Attachment()
			if err := m.SetConfig(DefaultConfig(ttl)); err != nil {
				t.Fatal(err)
			}
			wantDetached(t, m, ReasonKeepAliveFailures)
			if ctx.Err() == nil {
				t.Fatal("generation 2 context not cancelled")
			}
			wantKinds(t, r, "attached detached:keepalive-failures attached detached:keepalive-failures")
		})
	})
	t.Run("enforce-to-off-reattaches", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t, DefaultConfig(ttl))
			attachNow(t, m, 1)
			time.Sleep(7 * time.Second)
			synctest.Wait()
			wantDetached(t, m, ReasonLeaseDeadline)
			if err := m.SetConfig(modeConfig(ModeOff)); err != nil {
				t.Fatal(err)
			}
			wantAttached(t, m, true)
		})
	})
	t.Run("explicit-detach-survives-switch", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t, DefaultConfig(ttl))
			attachNow(t, m, 1)
			m.Detach(ReasonExplicit)
			if err := m.SetConfig(modeConfig(ModeObserve)); err != nil {
				t.Fatal(err)
			}
			wantDetached(t, m, ReasonExplicit)
		})
	})
	t.Run("starting-stays-detached", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t, DefaultConfig(ttl))
			if err := m.SetConfig(modeConfig(ModeOff)); err != nil {
				t.Fatal(err)
			}
			wantDetached(t, m, ReasonStarting)
		})
	})
	t.Run("off-to-enforce-after-deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t, modeConfig(ModeOff))
			r := record(m)
			attachNow(t, m, 1)
			time.Sleep(time.Minute)
			synctest.Wait()
			wantAttached(t, m, true)
			if s := m.State(); !s.WouldDetach || s.WouldReason != ReasonLeaseDeadline {
				t.Fatalf("off mode lost track of the decision: %+v", s)
			}
			if err := m.SetConfig(DefaultConfig(ttl)); err != nil {
				t.Fatal(err)
			}
			wantDetached(t, m, ReasonLeaseDeadline)
			wantKinds(t, r, "attached detached:lease-deadline")
		})
	})
	t.Run("observe-to-enforce-while-healthy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMachine(t, modeConfig(ModeObserve))
			r := record(m)
			attachNow(t, m, 1)
			if err := m.SetConfig(DefaultConfig(ttl)); err != nil {
				t.Fatal(err)
			}
			wantAttached(t, m, true)
			wantKinds(t, r, "attached")
		})
	})
}

func TestSetConfigMargin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		r := record(m)
		t0 := time.Now()
		attachNow(t, m, 1)
		cfg := DefaultConfig(ttl)
		cfg.DetachMargin = time.Second
		if err := m.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(8*time.Second - time.Nanosecond)
		synctest.Wait()
		wantAttached(t, m, true)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantDetached(t, m, ReasonLeaseDeadline)
		if at := r.last(t).At; !at.Equal(t0.Add(8 * time.Second)) {
			t.Fatalf("detached at %v, want %v", at, t0.Add(8*time.Second))
		}

		// A wider margin that the deadline no longer satisfies detaches at
		// once.
		m.KeepAliveOK(1, time.Now(), ttl)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		wantAttached(t, m, true) // deadline - now = 7s
		cfg.DetachMargin = 7 * time.Second
		if err := m.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		wantDetached(t, m, ReasonLeaseDeadline)
	})
}

func TestSetConfigThresholdWindowGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		attachNow(t, m, 1)
		m.KeepAliveFailed(1, errKA)
		wantAttached(t, m, true)
		cfg := DefaultConfig(ttl)
		cfg.KeepAliveFailureThreshold = 1
		if err := m.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		wantDetached(t, m, ReasonKeepAliveFailures)

		// A longer window applies to the window already open.
		t1 := time.Now()
		m.KeepAliveOK(1, t1, ttl)
		time.Sleep(500 * time.Millisecond)
		cfg.RecoverWindow = 4 * time.Second
		if err := m.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		m.KeepAliveOK(1, time.Now(), ttl)
		time.Sleep(3500*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		wantAttached(t, m, false)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantAttached(t, m, true)

		// A shorter window already elapsed attaches at once.
		m.LeaseLost(1)
		m.KeepAliveOK(2, time.Now(), ttl)
		time.Sleep(time.Second)
		cfg.RecoverWindow = 500 * time.Millisecond
		if err := m.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		wantAttached(t, m, true)

		// A longer grace applies to the pending error; a shorter, elapsed
		// one detaches at once.
		r := record(m)
		g := time.Now()
		m.StorageError(errStorage)
		cfg.StorageErrorGrace = 3 * time.Second
		if err := m.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		m.KeepAliveOK(2, time.Now(), ttl)
		time.Sleep(3*time.Second - time.Nanosecond)
		synctest.Wait()
		wantAttached(t, m, true)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantDetached(t, m, ReasonStorageError)
		if at := r.last(t).At; !at.Equal(g.Add(3 * time.Second)) {
			t.Fatalf("detached at %v, want %v", at, g.Add(3*time.Second))
		}
		m.StorageOK()
		m.KeepAliveOK(2, time.Now(), ttl)
		time.Sleep(time.Second)
		synctest.Wait()
		wantAttached(t, m, true)
		m.StorageError(errStorage)
		time.Sleep(500 * time.Millisecond)
		cfg.StorageErrorGrace = 200 * time.Millisecond
		if err := m.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		wantDetached(t, m, ReasonStorageError)
	})
}

func TestSetConfigInvalidChangesNothing(t *testing.T) {
	m := newMachine(t, DefaultConfig(ttl), WithClock(newFakeClock()))
	bad := DefaultConfig(ttl)
	bad.DetachMargin = ttl
	err := m.SetConfig(bad)
	var ce *ConfigError
	if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != "DetachMargin" {
		t.Fatalf("SetConfig(margin = ttl) = %v", err)
	}
	if m.Config() != DefaultConfig(ttl) {
		t.Fatalf("config changed to %+v", m.Config())
	}
}
