package detachment

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestEnforcementFollowsModeAndAttachment: Enforced only in enforce mode
// while attached; the decision context is live exactly while the decision
// is attached.
func TestEnforcementFollowsModeAndAttachment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl))
		if e := m.Enforcement(); e.Enforced || e.Ctx.Err() == nil {
			t.Fatalf("starting: %+v, want not enforced with a cancelled context", e)
		}
		attachNow(t, m, 1)
		e := m.Enforcement()
		if !e.Enforced || e.Ctx.Err() != nil {
			t.Fatalf("attached in enforce mode: enforced %v, ctx err %v", e.Enforced, e.Ctx.Err())
		}
		for _, mode := range []Mode{ModeObserve, ModeOff} {
			if err := m.SetConfig(modeConfig(mode)); err != nil {
				t.Fatal(err)
			}
			if got := m.Enforcement(); got.Enforced || got.Ctx != e.Ctx || got.Ctx.Err() != nil {
				t.Fatalf("%s: enforced %v, same decision context %v, err %v", mode, got.Enforced, got.Ctx == e.Ctx, got.Ctx.Err())
			}
		}
		if err := m.SetConfig(modeConfig(ModeEnforce)); err != nil {
			t.Fatal(err)
		}
		if got := m.Enforcement(); !got.Enforced || got.Ctx != e.Ctx {
			t.Fatalf("back to enforce: %+v", got)
		}
		m.Detach(ReasonExplicit)
		if got := m.Enforcement(); got.Enforced || e.Ctx.Err() == nil {
			t.Fatalf("after Detach: enforced %v, decision context err %v", got.Enforced, e.Ctx.Err())
		}
	})
}

// TestEnforcementOutlivesSwitchToObserve: work started under enforce and
// bound to the decision context stops at the lease cutoff although the
// runner switched to observe meanwhile and stays attached: the promise its
// claim made (stopped before the lease expires) holds across the switch.
func TestEnforcementOutlivesSwitchToObserve(t *testing.T) {
	for _, mode := range []Mode{ModeObserve, ModeOff} {
		t.Run(string(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMachine(t, DefaultConfig(ttl))
				attachNow(t, m, 1)
				sentAt := time.Now()
				work := m.Enforcement()
				if !work.Enforced {
					t.Fatal("not enforced")
				}
				if err := m.SetConfig(modeConfig(mode)); err != nil {
					t.Fatal(err)
				}
				att, _, _ := m.Attachment()
				cutoff := sentAt.Add(ttl - DefaultConfig(ttl).DetachMargin)
				time.Sleep(cutoff.Sub(time.Now()) - time.Nanosecond)
				synctest.Wait()
				if work.Ctx.Err() != nil {
					t.Fatal("decision context ended before the cutoff")
				}
				time.Sleep(time.Nanosecond)
				synctest.Wait()
				if work.Ctx.Err() == nil {
					t.Fatal("decision context live past the cutoff")
				}
				var de *DetachedError
				if cause := context.Cause(work.Ctx); !errors.As(cause, &de) || de.Reason != ReasonLeaseDeadline || !de.At.Equal(cutoff) {
					t.Fatalf("cause %v, want lease-deadline at %v", cause, cutoff)
				}
				if att.Err() != nil {
					t.Fatalf("%s mode cancelled the attachment", mode)
				}
				wantAttached(t, m, true)
				if got := m.Enforcement(); got.Enforced || got.Ctx.Err() == nil {
					t.Fatalf("after the cutoff: %+v", got)
				}
				// Healthy again: a new decision context, still not enforced.
				m.KeepAliveOK(1, time.Now(), ttl)
				time.Sleep(DefaultRecoverWindow)
				synctest.Wait()
				if got := m.Enforcement(); got.Enforced || got.Ctx.Err() != nil || got.Ctx == work.Ctx {
					t.Fatalf("recovered in %s: enforced %v, err %v, same ctx %v", mode, got.Enforced, got.Ctx.Err(), got.Ctx == work.Ctx)
				}
			})
		})
	}
}

// TestEnforcementEndsWithStop: Close ends the decision context.
func TestEnforcementEndsWithStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, modeConfig(ModeObserve))
		attachNow(t, m, 1)
		e := m.Enforcement()
		if e.Enforced || e.Ctx.Err() != nil {
			t.Fatalf("observe: %+v", e)
		}
		m.Close()
		if e.Ctx.Err() == nil {
			t.Fatal("decision context live after Close")
		}
	})
}
