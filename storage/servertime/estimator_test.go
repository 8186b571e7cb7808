package servertime

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a local clock the test moves by hand.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time               { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Advance(d time.Duration)      { c.ns.Add(int64(d)) }
func (c *fakeClock) At(d time.Duration) time.Time { return c.Now().Add(d) }

// server simulates a remote clock: offset from the local clock, a rate error
// (server runs rate faster), and the lag of its Date header behind its clock.
type server struct {
	origin time.Time     // local instant the rate error is measured from
	offset time.Duration // server minus local at origin
	rate   float64
}

func (s server) clock(local time.Time) time.Time {
	el := local.Sub(s.origin)
	return local.Add(s.offset + time.Duration(float64(el)*s.rate))
}

// exchange simulates one request: sent now, answered after rtt, with the
// server reading its clock at a random point of the round trip.
func exchange(t *testing.T, e *Estimator, c *fakeClock, s server, rtt time.Duration, rng *rand.Rand) {
	t.Helper()
	sent := c.Now()
	read := sent.Add(time.Duration(rng.Int64N(int64(rtt) + 1)))
	c.Advance(rtt)
	e.Observe(sent, c.Now(), s.clock(read).Truncate(time.Second))
}

// checkContains fails unless the estimate's interval holds the server's true
// clock now.
func checkContains(t *testing.T, e *Estimator, c *fakeClock, s server) {
	t.Helper()
	st, ok := e.Now()
	if !ok {
		t.Fatal("Now: no estimate after samples")
	}
	truth := s.clock(c.Now())
	if truth.Before(st.Earliest()) || truth.After(st.Latest()) {
		t.Fatalf("server clock %s outside estimate [%s, %s] (now %s ± %s)",
			truth.Format(time.RFC3339Nano), st.Earliest().Format(time.RFC3339Nano),
			st.Latest().Format(time.RFC3339Nano), st.Now.Format(time.RFC3339Nano), st.Uncertainty)
	}
}

func TestNoSamples(t *testing.T) {
	e := New()
	if _, ok := e.Now(); ok {
		t.Fatal("Now reported an estimate before any sample")
	}
	if _, ok := e.Age(); ok {
		t.Fatal("Age reported a sample before any sample")
	}
}

func TestSingleSampleBoundsWithinResolutionPlusRTT(t *testing.T) {
	c := newFakeClock()
	e := New(WithClock(c.Now), WithDrift(0))
	s := server{origin: c.Now(), offset: 42*time.Second + 300*time.Millisecond}
	rtt := 20 * time.Millisecond
	exchange(t, e, c, s, rtt, rand.New(rand.NewPCG(1, 1)))
	checkContains(t, e, c, s)
	st, _ := e.Now()
	if want := (time.Second + rtt + 1) / 2; st.Uncertainty != want {
		t.Fatalf("uncertainty after one sample = %s, want %s", st.Uncertainty, want)
	}
	if age, ok := e.Age(); !ok || age != 0 {
		t.Fatalf("Age right after a sample = %s, %v; want 0, true", age, ok)
	}
}

func TestConvergesToRoundTrip(t *testing.T) {
	// Without a drift allowance the interval only narrows: once samples have
	// landed just after and just before second boundaries of the server's
	// clock it is about one round trip wide.
	c := newFakeClock()
	e := New(WithClock(c.Now), WithDrift(0))
	s := server{origin: c.Now(), offset: -3*time.Hour + 123456789*time.Nanosecond}
	rng := rand.New(rand.NewPCG(7, 7))
	rtt := 4 * time.Millisecond
	for i := 0; i < 2000; i++ {
		exchange(t, e, c, s, rtt, rng)
		checkContains(t, e, c, s)
		// Irregular gaps put samples at every phase of the server's second.
		c.Advance(time.Duration(rng.Int64N(int64(700 * time.Millisecond))))
	}
	st, _ := e.Now()
	if st.Uncertainty > rtt {
		t.Fatalf("uncertainty after 2000 samples = %s, want ≤ the round trip %s", st.Uncertainty, rtt)
	}
	if got := e.Stats(); got.Samples != 2000 || got.Jumps != 0 {
		t.Fatalf("Stats = %+v, want 2000 samples and no jumps", got)
	}
}

func TestSteadyStateWithDriftAllowance(t *testing.T) {
	// With the default 200 ppm allowance, widening between samples balances
	// the narrowing: at a few samples a second the estimate settles to tens
	// of milliseconds, far below one sample's half second.
	c := newFakeClock()
	e := New(WithClock(c.Now))
	s := server{origin: c.Now(), offset: 17 * time.Second}
	rng := rand.New(rand.NewPCG(8, 8))
	for i := 0; i < 1000; i++ {
		exchange(t, e, c, s, 4*time.Millisecond, rng)
		checkContains(t, e, c, s)
		c.Advance(time.Duration(rng.Int64N(int64(500 * time.Millisecond))))
	}
	if st, _ := e.Now(); st.Uncertainty > 50*time.Millisecond {
		t.Fatalf("uncertainty after 1000 samples = %s, want ≤ 50ms", st.Uncertainty)
	}
}

func TestDriftWidensTheInterval(t *testing.T) {
	c := newFakeClock()
	e := New(WithClock(c.Now), WithDrift(200e-6))
	s := server{origin: c.Now(), offset: time.Minute}
	rng := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 100; i++ {
		exchange(t, e, c, s, 2*time.Millisecond, rng)
		c.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
	}
	before, _ := e.Now()
	age0, _ := e.Age()
	c.Advance(100 * time.Second)
	after, _ := e.Now()
	age1, _ := e.Age()
	if age1-age0 != 100*time.Second {
		t.Fatalf("Age grew by %s over 100s", age1-age0)
	}
	// 200 ppm of 100s is 20ms on each side.
	grew := after.Uncertainty - before.Uncertainty
	if grew < 20*time.Millisecond-time.Microsecond || grew > 20*time.Millisecond+time.Microsecond {
		t.Fatalf("uncertainty grew by %s over 100s, want 20ms", grew)
	}
	if d := after.Now.Sub(before.Now); d < 100*time.Second-time.Microsecond || d > 100*time.Second+time.Microsecond {
		t.Fatalf("estimate advanced by %s over 100s of local time, want 100s", d)
	}
}

func TestDriftingServerStaysInside(t *testing.T) {
	// The server runs 150 ppm fast, inside the 200 ppm allowance: no sample
	// may look like a jump and the truth must stay inside the estimate.
	c := newFakeClock()
	e := New(WithClock(c.Now))
	s := server{origin: c.Now(), offset: 5 * time.Second, rate: 150e-6}
	rng := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < 300; i++ {
		exchange(t, e, c, s, 3*time.Millisecond, rng)
		checkContains(t, e, c, s)
		c.Advance(time.Duration(rng.Int64N(int64(5 * time.Second))))
		checkContains(t, e, c, s)
	}
	if j := e.Stats().Jumps; j != 0 {
		t.Fatalf("%d jumps for a server drifting within the allowance", j)
	}
}

func TestServerClockJumpRestarts(t *testing.T) {
	c := newFakeClock()
	e := New(WithClock(c.Now))
	s := server{origin: c.Now(), offset: 10 * time.Second}
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 50; i++ {
		exchange(t, e, c, s, 5*time.Millisecond, rng)
		c.Advance(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
	}
	checkContains(t, e, c, s)

	s.offset -= 90 * time.Second // the server's clock is stepped back
	exchange(t, e, c, s, 5*time.Millisecond, rng)
	checkContains(t, e, c, s)
	if j := e.Stats().Jumps; j != 1 {
		t.Fatalf("Jumps = %d after one clock step, want 1", j)
	}
	st, _ := e.Now()
	if st.Uncertainty > time.Second {
		t.Fatalf("uncertainty after restart = %s, want one sample's (< 1s)", st.Uncertainty)
	}
	for i := 0; i < 200; i++ {
		c.Advance(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
		exchange(t, e, c, s, 5*time.Millisecond, rng)
		checkContains(t, e, c, s)
	}
	if st, _ := e.Now(); st.Uncertainty > 50*time.Millisecond {
		t.Fatalf("uncertainty 200 samples after the jump = %s, want ≤ 50ms", st.Uncertainty)
	}
	if j := e.Stats().Jumps; j != 1 {
		t.Fatalf("Jumps = %d after re-converging, want still 1", j)
	}
}

func TestLaggingDateHeaderNeedsResolution(t *testing.T) {
	// A server that caches its Date header and refreshes it once a second
	// (fasthttp) reports up to ~2s behind. With the resolution widened to
	// cover the lag, its samples stay consistent and bound the truth.
	c := newFakeClock()
	e := New(WithClock(c.Now), WithResolution(2*time.Second))
	s := server{origin: c.Now(), offset: 7*time.Second + 250*time.Millisecond}
	rng := rand.New(rand.NewPCG(11, 11))
	refreshed := s.clock(c.Now()) // server clock at the last Date refresh
	for i := 0; i < 300; i++ {
		sent := c.Now()
		read := sent.Add(time.Duration(rng.Int64N(int64(3*time.Millisecond) + 1)))
		if now := s.clock(read); now.Sub(refreshed) >= time.Second {
			refreshed = now.Add(-time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
		}
		c.Advance(3 * time.Millisecond)
		e.Observe(sent, c.Now(), refreshed.Truncate(time.Second))
		checkContains(t, e, c, s)
		c.Advance(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
	}
	if j := e.Stats().Jumps; j != 0 {
		t.Fatalf("%d jumps for a lagging Date within the resolution", j)
	}
}

func TestIgnoresInvalidAndAcceptsOutOfOrderSamples(t *testing.T) {
	c := newFakeClock()
	e := New(WithClock(c.Now))
	now := c.Now()
	e.Observe(now, now.Add(-time.Millisecond), now) // received before sent
	e.Observe(now, now, time.Time{})                // no Date
	if got := e.Stats().Samples; got != 0 {
		t.Fatalf("Samples = %d after invalid samples, want 0", got)
	}

	s := server{origin: c.Now(), offset: 2 * time.Second}
	rng := rand.New(rand.NewPCG(13, 13))
	type sample struct{ sent, recv, date time.Time }
	var samples []sample
	for i := 0; i < 40; i++ {
		sent := c.Now()
		read := sent.Add(time.Duration(rng.Int64N(int64(time.Millisecond))))
		c.Advance(time.Millisecond)
		samples = append(samples, sample{sent, c.Now(), s.clock(read).Truncate(time.Second)})
		c.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
	}
	rng.Shuffle(len(samples), func(i, j int) { samples[i], samples[j] = samples[j], samples[i] })
	for _, x := range samples {
		e.Observe(x.sent, x.recv, x.date)
		checkContains(t, e, c, s)
	}
	if j := e.Stats().Jumps; j != 0 {
		t.Fatalf("%d jumps from reordered consistent samples", j)
	}
}

func TestConcurrentUse(t *testing.T) {
	c := newFakeClock()
	e := New(WithClock(c.Now))
	s := server{origin: c.Now(), offset: time.Hour}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 17))
			for i := 0; i < 500; i++ {
				sent := c.Now()
				c.Advance(time.Duration(rng.Int64N(int64(time.Millisecond))))
				recv := c.Now()
				read := sent.Add(recv.Sub(sent) / 2)
				e.Observe(sent, recv, s.clock(read).Truncate(time.Second))
				if _, ok := e.Now(); !ok {
					t.Error("Now: no estimate after a sample")
					return
				}
				e.Age()
				e.Stats()
			}
		}(g)
	}
	wg.Wait()
	checkContains(t, e, c, s)
	if got := e.Stats().Samples; got != 8*500 {
		t.Fatalf("Samples = %d, want %d", got, 8*500)
	}
}

func TestRealClockAgainstLocalServer(t *testing.T) {
	// With the real monotonic clock and a "server" that is this process, the
	// estimate must contain time.Now.
	e := New()
	for i := 0; i < 5; i++ {
		sent := time.Now()
		date := time.Now().Truncate(time.Second)
		e.Observe(sent, time.Now(), date)
	}
	before := time.Now()
	st, ok := e.Now()
	after := time.Now()
	if !ok {
		t.Fatal("no estimate")
	}
	// The server's (this process's) clock at the instant Now read lies in
	// [before, after]; the estimate's interval must overlap it.
	if after.Before(st.Earliest()) || before.After(st.Latest()) {
		t.Fatalf("local clock [%s, %s] outside estimate [%s, %s]", before, after, st.Earliest(), st.Latest())
	}
}
