package detachment

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// pausedClock is a clock whose time moves while its timers do not fire:
// a process stopped (SIGSTOP) past its lease, just resumed, before the
// runtime has run its timers.
type pausedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *pausedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *pausedClock) AfterFunc(time.Duration, func()) Timer { return stoppedTimer{} }

func (c *pausedClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type stoppedTimer struct{}

func (stoppedTimer) Stop() bool { return true }

// TestCheckDetachesAfterAPause: the clock passes the cutoff while the
// cutoff timer has not fired. Enforcement and the attachment still say
// attached — they report what was decided — until Check, which detaches
// before it returns: the attachment and decision contexts are cancelled,
// with the lease deadline as the reason, at the time Check ran.
func TestCheckDetachesAfterAPause(t *testing.T) {
	clk := &pausedClock{now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	m := newMachine(t, DefaultConfig(ttl), WithClock(clk))
	defer m.Close()
	r := record(m)
	attachNow(t, m, 1)
	ctx, _, _ := m.Attachment()
	enf := m.Enforcement()
	if !enf.Enforced || enf.Ctx.Err() != nil {
		t.Fatal("not enforcing after attaching")
	}

	m.Check() // before the cutoff: nothing
	wantAttached(t, m, true)

	clk.advance(ttl) // paused past the lease; no timer ran
	if ctx.Err() != nil {
		t.Fatal("the attachment ended without a timer or a check: the test's clock fires timers")
	}
	m.Check()
	if ctx.Err() == nil || enf.Ctx.Err() == nil {
		t.Fatalf("after Check: attachment ended %v, decision ended %v; want both", ctx.Err() != nil, enf.Ctx.Err() != nil)
	}
	var de *DetachedError
	if !errors.As(context.Cause(ctx), &de) || de.Reason != ReasonLeaseDeadline || !de.At.Equal(clk.Now()) {
		t.Fatalf("cause %v, want a lease-deadline detachment at %v", context.Cause(ctx), clk.Now())
	}
	wantDetached(t, m, ReasonLeaseDeadline)
	if got := m.Enforcement(); got.Enforced {
		t.Fatal("still enforcing after Check detached")
	}
	// The subscribers hear of it on a goroutine of their own.
	m.waitDelivered(m.issuedNow())
	wantKinds(t, r, "attached detached:lease-deadline")
}

// issuedNow is the number of batches issued so far.
func (m *Machine) issuedNow() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.issued
}

// TestHoldAfterAPause: once Check has detached a paused runner, work not
// bound to a decision (a claim made now is not enforced) is held in
// enforce mode, and goes on in observe mode, where a detachment stops
// nothing.
func TestHoldAfterAPause(t *testing.T) {
	for _, mode := range []Mode{ModeEnforce, ModeObserve} {
		clk := &pausedClock{now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
		cfg := DefaultConfig(ttl)
		cfg.Mode = mode
		m := newMachine(t, cfg, WithClock(clk))
		attachNow(t, m, 1)
		if m.Enforcement().Hold {
			t.Fatalf("%s: held while attached", mode)
		}
		clk.advance(ttl) // paused past the lease; no timer ran
		m.Check()
		got := m.Enforcement()
		if got.Enforced {
			t.Fatalf("%s: still enforcing after Check detached", mode)
		}
		if want := mode == ModeEnforce; got.Hold != want {
			t.Fatalf("%s: Hold = %v after the detachment, want %v", mode, got.Hold, want)
		}
		if got.Ctx == nil || got.Ctx.Err() == nil {
			t.Fatalf("%s: the decision context is live after the detachment", mode)
		}
		m.Close()
	}
}
