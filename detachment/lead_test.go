package detachment

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestTimerLead: with a lead, the cutoff (and the timer) come that much
// before deadline - margin, and a keep-alive that would leave less than the
// lead before the cutoff does not vouch for the lease.
func TestTimerLead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lead = 40 * time.Millisecond
		m := newMachine(t, DefaultConfig(ttl), WithTimerLead(lead))
		r := record(m)
		attachNow(t, m, 1)
		sent := time.Now()
		cutoff := sent.Add(ttl - 3*time.Second - lead)
		if s := m.State(); !s.DetachAt.Equal(cutoff) {
			t.Fatalf("DetachAt %v, want %v (deadline - margin - lead)", s.DetachAt, cutoff)
		}
		time.Sleep(cutoff.Sub(sent) - time.Nanosecond)
		synctest.Wait()
		wantAttached(t, m, true)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantDetached(t, m, ReasonLeaseDeadline)
		if tr := r.last(t); !tr.At.Equal(cutoff) {
			t.Fatalf("detached at %v, want %v", tr.At, cutoff)
		}
		m.Close()
	})
}

func TestTimerLeadIgnoresNegative(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachine(t, DefaultConfig(ttl), WithTimerLead(-time.Second))
		attachNow(t, m, 1)
		if s := m.State(); !s.DetachAt.Equal(s.Deadline.Add(-3 * time.Second)) {
			t.Fatalf("negative lead changed the cutoff: %+v", s)
		}
		m.Close()
	})
}
