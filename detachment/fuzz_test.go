package detachment

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// FuzzMachine drives machines with input sequences decoded from data and
// checks the invariants after every step (see runScript). `go test` runs the
// seed corpus; `go test -fuzz FuzzMachine` explores.
func FuzzMachine(f *testing.F) {
	f.Add([]byte{0, 0, 5, 120, 5, 10})
	f.Add([]byte{0, 0, 1, 0, 1, 0, 0, 3, 5, 50, 4, 0, 5, 50})
	f.Add([]byte{0, 0, 3, 0, 6, 30, 2, 0, 7, 0, 5, 60, 8, 1, 9, 0, 5, 200, 8, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			data = data[:4096] // runScript is quadratic; longer adds nothing
		}
		runScript(t, data)
	})
}

// TestRandomScripts runs runScript over many pseudo-random sequences.
func TestRandomScripts(t *testing.T) {
	n := 400
	if testing.Short() {
		n = 50
	}
	for seed := range n {
		rng := rand.New(rand.NewPCG(uint64(seed), 42))
		data := make([]byte, 2*(50+rng.IntN(250)))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		if !t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runScript(t, data) }) {
			return
		}
	}
}

// checked is a machine under a script, with what its checks remember.
type checked struct {
	m     *Machine
	rec   *recorder
	fixed Mode // the mode it keeps; "" for the machine whose config changes
	ctxs  map[uint64]context.Context
	seen  int // transitions already checked
	stop  bool
}

// runScript feeds the same inputs, two bytes per step, to an enforce, an
// observe and an off machine, and to a fourth machine that also gets
// random SetConfig and Detach calls, all on one fake clock, and checks:
//   - enforce mode: attached ⇒ now < deadline - margin, and attached ⇔ the
//     decision is attached;
//   - generations increase by one per attach, a detach ends the current
//     one, attach and detach alternate;
//   - the context of every earlier generation is cancelled, the current
//     one is live iff attached;
//   - the decision is the same in every mode; observe reports exactly
//     enforce's transitions as Would*; off never detaches;
//   - after Detach(stopped) nothing re-attaches.
func runScript(t *testing.T, data []byte) {
	clk := newFakeClock()
	var cs []*checked
	for _, mode := range []Mode{ModeEnforce, ModeObserve, ModeOff, ""} {
		cfg := DefaultConfig(ttl)
		if mode != "" {
			cfg.Mode = mode
		}
		m := newMachine(t, cfg, WithClock(clk))
		cs = append(cs, &checked{m: m, rec: record(m), fixed: mode, ctxs: map[uint64]context.Context{}})
	}
	all := func(f func(m *Machine)) {
		for _, c := range cs {
			f(c.m)
		}
	}
	chaos := cs[3].m
	lease := int64(1)
	var log []string
	for i := 0; i+1 < len(data); i += 2 {
		op, arg := data[i]%10, data[i+1]
		now := clk.Now()
		switch op {
		case 0: // keep-alive answered, sent up to 7.5s ago, sometimes ttl ≤ 0
			sent := now.Add(-time.Duration(arg%16) * 500 * time.Millisecond)
			d := ttl
			switch arg >> 6 {
			case 1:
				d = ttl / 2
			case 2:
				if arg&0x20 != 0 {
					d = 0
				}
			}
			all(func(m *Machine) { m.KeepAliveOK(lease-int64(arg>>5&1), sent, d) })
			log = append(log, fmt.Sprintf("ok(%d,-%v,%v)", lease, now.Sub(sent), d))
		case 1:
			all(func(m *Machine) { m.KeepAliveFailed(lease, errKA) })
			log = append(log, "failed")
		case 2:
			l := lease - int64(arg%3) // current, retired or older
			all(func(m *Machine) { m.LeaseLost(l) })
			log = append(log, fmt.Sprintf("lost(%d)", l))
		case 3:
			all(func(m *Machine) { m.StorageError(errStorage) })
			log = append(log, "storage-error")
		case 4:
			all(func(m *Machine) { m.StorageOK() })
			log = append(log, "storage-ok")
		case 5, 6:
			d := time.Duration(arg) * 50 * time.Millisecond
			clk.Advance(d)
			log = append(log, fmt.Sprintf("advance(%v)", d))
		case 7:
			lease++
			all(func(m *Machine) { m.KeepAliveOK(lease, now, ttl) })
			log = append(log, fmt.Sprintf("new-lease(%d)", lease))
		case 8:
			cfg := Config{
				Mode:                      []Mode{ModeEnforce, ModeObserve, ModeOff}[arg%3],
				DetachMargin:              time.Duration(1+arg>>2%8) * time.Second,
				RecoverWindow:             time.Duration(1+arg>>5) * 500 * time.Millisecond,
				KeepAliveFailureThreshold: 1 + int(arg>>3%3),
				StorageErrorGrace:         time.Duration(1+arg>>4%4) * 400 * time.Millisecond,
			}
			if err := chaos.SetConfig(cfg); err != nil {
				t.Fatalf("SetConfig(%+v): %v", cfg, err)
			}
			log = append(log, fmt.Sprintf("config(%+v)", cfg))
		case 9:
			r := ReasonExplicit
			if arg == 255 {
				r, cs[3].stop = ReasonStopped, true
			}
			chaos.Detach(r)
			log = append(log, fmt.Sprintf("detach(%s)", r))
		}
		for _, c := range cs {
			if err := c.check(clk.Now()); err != "" {
				t.Fatalf("%s machine after %s:\n%s\nstate %+v\ntransitions %s",
					c.name(), strings.Join(log, " "), err, c.m.State(), c.rec.kinds())
			}
		}
	}
	// Observe reports what enforce did, after the shared first attach.
	enf, obs := cs[0].rec.all(), cs[1].rec.all()
	if len(enf) != len(obs) {
		t.Fatalf("enforce made %d transitions, observe reported %d\n%s\n%s\nafter %s",
			len(enf), len(obs), cs[0].rec.kinds(), cs[1].rec.kinds(), strings.Join(log, " "))
	}
	for i := range enf {
		want := enf[i].Kind
		if i > 0 {
			want += WouldDetach - Detached
			if enf[i].Kind == Attached {
				want = WouldAttach
			}
		}
		if obs[i].Kind != want || obs[i].Reason != enf[i].Reason || !obs[i].At.Equal(enf[i].At) {
			t.Fatalf("transition %d: enforce %+v, observe %+v", i, enf[i], obs[i])
		}
	}
	if n := len(cs[2].rec.all()); n > 1 {
		t.Fatalf("off mode made %d transitions: %s", n, cs[2].rec.kinds())
	}
	for _, c := range cs {
		c.m.Close()
		c.stop = true
		if err := c.check(clk.Now()); err != "" {
			t.Fatalf("%s machine after Close: %s", c.name(), err)
		}
	}
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers armed after Close", n)
	}
}

func (c *checked) name() string {
	if c.fixed == "" {
		return "chaos"
	}
	return string(c.fixed)
}

// check returns what is wrong with the machine, or "".
func (c *checked) check(now time.Time) string {
	s := c.m.State()
	ctx, gen, attached := c.m.Attachment()
	if attached != s.Attached || gen != s.Generation {
		return "Attachment and State disagree"
	}
	if s.Mode == ModeEnforce {
		if s.Attached && !now.Before(s.DetachAt) {
			return fmt.Sprintf("attached at %v, not before deadline - margin %v", now, s.DetachAt)
		}
		if s.Attached == s.WouldDetach {
			return "enforce attachment differs from the decision"
		}
	}
	if c.fixed != "" && c.fixed != ModeEnforce && s.Generation > 0 && !s.Attached && !s.Stopped {
		return "observe/off machine detached"
	}
	if c.stop && (s.Attached || !s.Stopped) {
		return "attached after Detach(stopped)"
	}
	if s.Attached != (ctx.Err() == nil) {
		return fmt.Sprintf("attached=%v but context err %v", s.Attached, ctx.Err())
	}
	c.ctxs[gen] = ctx
	for g, old := range c.ctxs {
		if g < gen && old.Err() == nil {
			return fmt.Sprintf("generation %d context live in generation %d", g, gen)
		}
	}
	ts := c.rec.all()
	for i := c.seen; i < len(ts); i++ {
		tr, prev := ts[i], Transition{Kind: Detached}
		for j := i - 1; j >= 0; j-- {
			if k := ts[j].Kind; k == Attached || k == Detached {
				prev = ts[j]
				break
			}
		}
		switch tr.Kind {
		case Attached:
			if prev.Kind != Detached || tr.Generation != prev.Generation+1 {
				return fmt.Sprintf("attach %+v after %+v", tr, prev)
			}
		case Detached:
			if prev.Kind != Attached || tr.Generation != prev.Generation {
				return fmt.Sprintf("detach %+v after %+v", tr, prev)
			}
		}
	}
	c.seen = len(ts)
	if s.Generation != uint64(countKind(ts, Attached)) {
		return fmt.Sprintf("generation %d after %d attaches", s.Generation, countKind(ts, Attached))
	}
	return ""
}

func countKind(ts []Transition, k TransitionKind) int {
	n := 0
	for _, tr := range ts {
		if tr.Kind == k {
			n++
		}
	}
	return n
}
