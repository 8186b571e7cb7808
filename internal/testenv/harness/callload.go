package harness

import (
	"context"
	"sync"
	"time"
)

// CallSample is one entity call a CallLoad made, as its caller saw it.
type CallSample struct {
	ID         string // the entity called
	Start, End time.Time
	Reply      []byte
	Err        error
}

// Latency is how long the call took.
func (s CallSample) Latency() time.Duration { return s.End.Sub(s.Start) }

// CallLoad is a closed loop of callers: each makes one call, waits for its
// outcome, and makes the next, so that the load follows what the cluster
// answers (the way a service's request handlers call entities). Every call
// is recorded, for the checks to judge afterwards against the times of
// the faults they injected.
type CallLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	calls  []CallSample
}

// StartCallLoad starts callers goroutines calling call in a closed loop,
// round-robin over ids (caller k starts at id k), each call bounded by
// timeout. Stop ends them.
func StartCallLoad(callers int, ids []string, timeout time.Duration, call func(ctx context.Context, id string) ([]byte, error)) *CallLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &CallLoad{cancel: cancel}
	for k := range callers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := k; ctx.Err() == nil; i += callers {
				id := ids[i%len(ids)]
				cctx, cancel := context.WithTimeout(ctx, timeout)
				s := CallSample{ID: id, Start: time.Now()}
				s.Reply, s.Err = call(cctx, id)
				s.End = time.Now()
				cancel()
				if ctx.Err() != nil && s.Err != nil {
					return // cut short by Stop, not by the cluster
				}
				l.mu.Lock()
				l.calls = append(l.calls, s)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// Stop ends the callers, waits for their last calls and returns every call
// made, in order of end.
func (l *CallLoad) Stop() []CallSample {
	l.cancel()
	l.wg.Wait()
	return l.Calls()
}

// Calls returns the calls made so far, in order of end.
func (l *CallLoad) Calls() []CallSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]CallSample(nil), l.calls...)
}

// Count counts the calls made so far for which keep holds.
func (l *CallLoad) Count(keep func(CallSample) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.calls {
		if keep(s) {
			n++
		}
	}
	return n
}

// CallStats summarises the calls that ended in a window.
type CallStats struct {
	Calls, Errors int
	PerSecond     float64
	MaxLatency    time.Duration
}

// Stats summarises the calls of samples that ended in [from, to].
func Stats(samples []CallSample, from, to time.Time) CallStats {
	var st CallStats
	for _, s := range samples {
		if s.End.Before(from) || s.End.After(to) {
			continue
		}
		st.Calls++
		if s.Err != nil {
			st.Errors++
		}
		st.MaxLatency = max(st.MaxLatency, s.Latency())
	}
	if d := to.Sub(from).Seconds(); d > 0 {
		st.PerSecond = float64(st.Calls) / d
	}
	return st
}

// ForEach calls f(0), …, f(n-1) on workers goroutines and returns when
// every call has.
func ForEach(n, workers int, f func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
