package sharding

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// keepAliveGate wraps a real runner store so that the test sees every
// keep-alive its sessions make and, while closed, answers each one: with an
// error (the call fails without reaching etcd) or nil (it goes through).
type keepAliveGate struct {
	Store
	calls chan keepAliveCall

	mu     sync.Mutex
	open   bool                      // let every call through unasked
	log    []keepAliveCall           // every call, in order
	passed []storage.KeepAliveResult // what the calls that went through confirmed
}

// keepAliveCall is one Session.KeepAlive call as the gate saw it.
type keepAliveCall struct {
	at       time.Time     // when the call was made
	timeout  time.Duration // its context's deadline minus at; 0: none
	answered chan error
}

func (g *keepAliveGate) Register(ctx context.Context, r storage.RunnerInfo, ttl time.Duration) (storage.Session, error) {
	ss, err := g.Store.Register(ctx, r, ttl)
	if err != nil {
		return nil, err
	}
	return &gatedSession{Session: ss, g: g}, nil
}

func (g *keepAliveGate) setOpen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
}

func (g *keepAliveGate) calledAt() []keepAliveCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]keepAliveCall(nil), g.log...)
}

func (g *keepAliveGate) lastPassed() storage.KeepAliveResult {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.passed[len(g.passed)-1]
}

// next waits for the next keep-alive call of a closed gate.
func (g *keepAliveGate) next(t *testing.T, within time.Duration) keepAliveCall {
	t.Helper()
	select {
	case c := <-g.calls:
		return c
	case <-time.After(within):
		t.Fatalf("no keep-alive call within %s", within)
	}
	return keepAliveCall{}
}

type gatedSession struct {
	storage.Session
	g *keepAliveGate
}

func (s *gatedSession) KeepAlive(ctx context.Context) (storage.KeepAliveResult, error) {
	c := keepAliveCall{at: time.Now(), answered: make(chan error, 1)}
	if dl, ok := ctx.Deadline(); ok {
		c.timeout = dl.Sub(c.at)
	}
	s.g.mu.Lock()
	s.g.log = append(s.g.log, c)
	open := s.g.open
	s.g.mu.Unlock()
	if !open {
		var err error
		select {
		case s.g.calls <- c:
			select {
			case err = <-c.answered:
			case <-ctx.Done():
				err = fmt.Errorf("%w: the test did not answer: %w", storage.ErrUnavailable, ctx.Err())
			case <-s.Done():
				err = storage.ErrSessionClosed
			}
		case <-s.Done():
			err = storage.ErrSessionClosed
		}
		if err != nil {
			return storage.KeepAliveResult{SentAt: c.at}, err
		}
	}
	res, err := s.Session.KeepAlive(ctx)
	if err == nil {
		s.g.mu.Lock()
		s.g.passed = append(s.g.passed, res)
		s.g.mu.Unlock()
	}
	return res, err
}

// runGated runs a Manager with cfg on a store behind a closed keep-alive
// gate, until the test ends.
func runGated(t *testing.T, cfg Config) (*Manager, *keepAliveGate) {
	t.Helper()
	st, err := etcd.New(testenv.SharedEtcd(t).Client(t), etcd.WithPrefix(testenv.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g := &keepAliveGate{Store: st, calls: make(chan keepAliveCall)}
	meta := storage.ClusterMeta{Shards: 4, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName}
	m, err := New(g, storage.RunnerInfo{ID: "r", Weight: 1}, meta, cfg, WithLogger(testLogger(t, "r")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		g.setOpen()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return m, g
}

// TestKeepAliveResultsReachTheMachineInOrder: every keep-alive result
// reaches the detachment machine as it comes, none coalesced: after N
// failures the machine's streak is N, having been 1, 2, … in turn, and the
// next success resets it and moves the deadline to exactly that keep-alive's
// send time plus its TTL.
func TestKeepAliveResultsReachTheMachineInOrder(t *testing.T) {
	cfg := DefaultConfigFor(10 * time.Second)
	cfg.KeepAliveInterval = 500 * time.Millisecond
	cfg.KeepAliveTimeout = 3 * time.Second
	m, g := runGated(t, cfg)
	var mu sync.Mutex
	var detached []detachment.Transition
	m.Machine().Subscribe(func(tr detachment.Transition) {
		if tr.Kind == detachment.Detached {
			mu.Lock()
			detached = append(detached, tr)
			mu.Unlock()
		}
	})
	const failures = 3 // past the threshold of 2
	threshold := cfg.Detachment.KeepAliveFailureThreshold
	for i := 0; i <= failures; i++ {
		c := g.next(t, 5*time.Second)
		// The previous result was fed before this call was made.
		st := m.Machine().State()
		if st.Streak != i {
			t.Fatalf("before keep-alive %d: the machine's streak is %d, want %d", i+1, st.Streak, i)
		}
		if v := testutil.ToFloat64(m.metrics.keepAliveFailures); v != float64(i) {
			t.Fatalf("before keep-alive %d: %s = %v, want %d", i+1, "lease_keepalive_failures_total", v, i)
		}
		if v := testutil.ToFloat64(m.metrics.keepAliveStreak); v != float64(i) {
			t.Fatalf("before keep-alive %d: %s = %v, want %d", i+1, "lease_keepalive_failure_streak", v, i)
		}
		if st.Attached != (i < threshold) {
			t.Fatalf("after %d failures: attached = %v, threshold %d", i, st.Attached, threshold)
		}
		if i < failures {
			c.answered <- errInjected
		} else {
			c.answered <- nil // through to etcd
		}
	}
	g.next(t, 5*time.Second) // the success was fed
	ok := g.lastPassed()
	st := m.Machine().State()
	if st.Streak != 0 || testutil.ToFloat64(m.metrics.keepAliveStreak) != 0 || testutil.ToFloat64(m.metrics.keepAliveFailures) != failures {
		t.Fatalf("after the success: streak %d, metrics streak %v failures %v", st.Streak,
			testutil.ToFloat64(m.metrics.keepAliveStreak), testutil.ToFloat64(m.metrics.keepAliveFailures))
	}
	if want := ok.SentAt.Add(ok.TTL); !st.Deadline.Equal(want) {
		t.Fatalf("deadline %v after a keep-alive sent %v with TTL %s: want %v", st.Deadline, ok.SentAt, ok.TTL, want)
	}
	// The round-trip histogram saw the registration's grant and the
	// success, answered; the injected failures had no answer to time.
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.metrics.keepAliveRTT)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if n := mfs[0].GetMetric()[0].GetHistogram().GetSampleCount(); n < 2 {
		t.Fatalf("tenure_sharding_lease_keepalive_duration_seconds counted %d round trips, want the grant and the success", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(detached) != 1 || detached[0].Reason != detachment.ReasonKeepAliveFailures || detached[0].Streak != threshold {
		t.Fatalf("detachments %+v, want one for %s at streak %d", detached, detachment.ReasonKeepAliveFailures, threshold)
	}
}

// TestKeepAliveCadenceIsTheConfigs: the Manager renews its lease on its
// Config's KeepAliveInterval (from one send to the next) and bounds each
// call by KeepAliveTimeout; the store has no cadence of its own.
func TestKeepAliveCadenceIsTheConfigs(t *testing.T) {
	cfg := DefaultConfigFor(10 * time.Second) // its defaults: every 3.3s, 1.7s per call
	cfg.KeepAliveInterval = 300 * time.Millisecond
	cfg.KeepAliveTimeout = time.Second
	m, g := runGated(t, cfg)
	g.setOpen()
	const calls = 5
	testenv.WaitFor(t, fmt.Sprintf("%d keep-alives", calls), 5*time.Second, func() bool {
		return len(g.calledAt()) >= calls
	})
	log := g.calledAt()
	for i, c := range log {
		if c.timeout <= 0 || c.timeout > cfg.KeepAliveTimeout {
			t.Errorf("keep-alive %d bounded by %s, want at most KeepAliveTimeout %s", i+1, c.timeout, cfg.KeepAliveTimeout)
		}
		if i > 0 {
			if gap := c.at.Sub(log[i-1].at); gap < cfg.KeepAliveInterval {
				t.Errorf("keep-alives %d and %d %s apart, less than KeepAliveInterval %s", i, i+1, gap, cfg.KeepAliveInterval)
			}
		}
	}
	if st := m.Machine().State(); st.Streak != 0 || !st.Attached {
		t.Fatalf("healthy runner: %+v", st)
	}
}
