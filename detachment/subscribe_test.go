package detachment

import (
	"context"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSubscribersOrderedUnderConcurrency hammers one machine from several
// goroutines (inputs, explicit detaches and a goroutine moving the clock and
// firing timers) and checks that every subscriber saw the same transitions,
// each once, in the order they happened. Run it with -race.
func TestSubscribersOrderedUnderConcurrency(t *testing.T) {
	clk := newFakeClock()
	cfg := DefaultConfig(ttl)
	cfg.RecoverWindow = 10 * time.Millisecond
	m := newMachine(t, cfg, WithClock(clk))

	const nsubs = 3
	recs := make([]*recorder, nsubs)
	for i := range recs {
		recs[i] = record(m)
	}
	// A subscriber that reads the machine, and checks the context of each
	// detached generation is cancelled by the time it hears of it.
	var ctxs sync.Map // generation → context
	var bad atomic.Value
	m.Subscribe(func(tr Transition) {
		ctx, gen, _ := m.Attachment()
		ctxs.LoadOrStore(gen, ctx)
		if tr.Kind == Detached {
			if c, ok := ctxs.Load(tr.Generation); ok && c.(context.Context).Err() == nil {
				bad.Store(tr)
			}
		}
	})
	// A subscriber that unsubscribes must stop hearing.
	var late atomic.Int64
	var cancelled atomic.Bool
	cancel := m.Subscribe(func(Transition) {
		if cancelled.Load() {
			late.Add(1)
		}
	})

	var lease atomic.Int64
	lease.Store(1)
	// Workers feed inputs and move the clock, so timers fire on their
	// goroutines too, racing the other workers' inputs.
	var wg sync.WaitGroup
	const workers, iters = 4, 1000
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range iters {
				l := lease.Load()
				switch p := rng.IntN(100); {
				case p < 45:
					m.KeepAliveOK(l, clk.Now(), ttl)
				case p < 60:
					m.StorageOK()
				case p < 68:
					m.KeepAliveFailed(l, errKA)
				case p < 76:
					m.StorageError(errStorage)
				case p < 78:
					m.LeaseLost(l)
					lease.CompareAndSwap(l, l+1)
				case p < 80:
					m.Detach(ReasonExplicit)
				default:
					clk.Advance(20 * time.Millisecond)
				}
				if w == 0 && i == iters/2 {
					cancel()
					cancelled.Store(true)
				}
			}
		})
	}
	wg.Wait()
	m.Close()

	ts := recs[0].all()
	for i := 1; i < nsubs; i++ {
		if !reflect.DeepEqual(ts, recs[i].all()) {
			t.Fatalf("subscriber %d saw a different sequence", i)
		}
	}
	var attaches uint64
	for i, tr := range ts {
		if i > 0 && tr.At.Before(ts[i-1].At) {
			t.Fatalf("transition %d at %v before transition %d at %v", i, tr.At, i-1, ts[i-1].At)
		}
		switch {
		case i%2 == 0 && tr.Kind == Attached:
			attaches++
			if tr.Generation != attaches {
				t.Fatalf("attach %d has generation %d", attaches, tr.Generation)
			}
		case i%2 == 1 && tr.Kind == Detached:
			if tr.Generation != attaches {
				t.Fatalf("detach of generation %d after attach %d", tr.Generation, attaches)
			}
		default:
			t.Fatalf("transition %d is %v: attached and detached must alternate", i, tr.Kind)
		}
	}
	if attaches < 3 {
		t.Fatalf("only %d attaches: the test did not exercise re-attachment", attaches)
	}
	if s := m.State(); s.Generation != attaches || s.Attached {
		t.Fatalf("final state %+v after %d attaches", s, attaches)
	}
	if tr := bad.Load(); tr != nil {
		t.Fatalf("subscriber told of %+v while its context was live", tr)
	}
	if n := late.Load(); n > 1 {
		t.Fatalf("unsubscribed function called %d times after cancel", n)
	}
	t.Logf("%d transitions, %d attaches", len(ts), attaches)
}
