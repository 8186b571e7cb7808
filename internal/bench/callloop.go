package bench

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/messaging"
)

// The closed loop of the call scenario: callers goroutines, each calling
// the next entity of its round-robin as soon as the previous call
// returns, measured from outside (the caller's wall clock around Call).

// callTimeout bounds one call: longer than a crash failover (lease TTL and
// the new owner's lock), so that a call waiting for the new owner is timed,
// not cut short.
const callTimeout = 4 * LeaseTTL

// callBody is every call's request; the echo entity returns it.
var callBody = []byte(`{"op":"bench","n":1}`)

// Error kinds as the callers saw them.
const (
	kindOK      = iota
	kindTimeout // the call's deadline ended (no owner found in time, or no reply)
	kindUnknown // messaging.ErrOutcomeUnknown: sent, the connection broke
	kindOther   // anything else, including a wrong reply
	numKinds
)

var kindNames = [numKinds]string{"ok", "timeout", "unknown", "other"}

// kindOf classifies a call's error.
func kindOf(err error) int {
	switch {
	case err == nil:
		return kindOK
	case errors.Is(err, messaging.ErrOutcomeUnknown), errors.Is(err, entity.ErrInterrupted):
		return kindUnknown
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, messaging.ErrNoOwner):
		return kindTimeout
	}
	return kindOther
}

// sample is one call that returned while the loop recorded: its start and
// end in ns since the loop's origin.
type sample struct{ start, end int64 }

// loop is a running closed loop of callers over ids.
type loop struct {
	origin time.Time
	ids    []string
	// recordFrom: calls returning at or after it (ns since origin) are
	// recorded; math.MaxInt64 before the measure starts.
	recordFrom atomic.Int64
	stopped    atomic.Bool
	track      atomic.Pointer[tracker]
	errs       [numKinds]atomic.Int64 // every call since the start, by kind
	firstErr   [numKinds]atomic.Pointer[string]
	lastErr    [numKinds]atomic.Pointer[string]
	wg         sync.WaitGroup
	bufs       [][]sample // per caller, read after stop
}

// startLoop starts callers callers calling the entities ids through c.
func startLoop(ctx context.Context, c entity.Caller, typ string, ids []string, callers int) *loop {
	l := &loop{origin: time.Now(), ids: ids, bufs: make([][]sample, callers)}
	l.recordFrom.Store(1<<63 - 1)
	for g := range callers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			buf := make([]sample, 0, 1<<12)
			defer func() { l.bufs[g] = buf }()
			// A context of the caller's own, as a service's request has:
			// every call's deadline context registers with its parent
			// under the parent's mutex, and one parent for all callers
			// made that the benchmark's own point of contention.
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			// Spread the callers over the ids, so that they seldom queue on
			// one entity's mailbox.
			i := g * len(ids) / callers
			for !l.stopped.Load() && ctx.Err() == nil {
				i %= len(ids)
				start := time.Since(l.origin)
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				reply, err := c.Call(cctx, typ, ids[i], callBody)
				cancel()
				end := time.Since(l.origin)
				if err == nil && !bytes.Equal(reply, callBody) {
					err = errWrongReply
				}
				k := kindOf(err)
				if k != kindOK {
					l.errs[k].Add(1)
					msg := err.Error()
					l.firstErr[k].CompareAndSwap(nil, &msg)
					l.lastErr[k].Store(&msg)
				}
				if int64(end) >= l.recordFrom.Load() {
					buf = append(buf, sample{start: int64(start), end: int64(end)})
				}
				if k == kindOK {
					if tr := l.track.Load(); tr != nil {
						tr.answered(i, int64(start), int64(end))
					}
				}
				i++
			}
		}()
	}
	return l
}

var errWrongReply = errors.New("bench: the echo entity's reply differs from the request")

// now returns the time since the loop's origin in ns.
func (l *loop) now() int64 { return int64(time.Since(l.origin)) }

// record starts recording the calls that return from now on and returns
// the moment (ns since origin).
func (l *loop) record() int64 {
	at := l.now()
	l.recordFrom.Store(at)
	return at
}

// stop stops the callers, waits for their last calls and returns the
// recorded samples and the moment it stopped (ns since origin).
func (l *loop) stop() ([]sample, int64) {
	at := l.now()
	l.stopped.Store(true)
	l.wg.Wait()
	var n int
	for _, b := range l.bufs {
		n += len(b)
	}
	out := make([]sample, 0, n)
	for _, b := range l.bufs {
		out = append(out, b...)
	}
	return out, at
}

// errors returns the errors the callers saw since the start, by kind, and
// the first and the last message of each kind seen (keyed "kind" and
// "kind (last)").
func (l *loop) errors() (map[string]int64, map[string]string) {
	counts := map[string]int64{}
	msgs := map[string]string{}
	for k := kindTimeout; k < numKinds; k++ {
		counts[kindNames[k]] = l.errs[k].Load()
		if m := l.firstErr[k].Load(); m != nil {
			msgs[kindNames[k]] = *m
		}
		if m := l.lastErr[k].Load(); m != nil && msgs[kindNames[k]] != *m {
			msgs[kindNames[k]+" (last)"] = *m
		}
	}
	return counts, msgs
}

// tracker waits for a set of entities to answer a call started at or
// after from: per entity, the end of the first such call.
type tracker struct {
	from    int64 // ns since the loop's origin
	want    []bool
	first   []atomic.Int64 // 0: not yet
	pending atomic.Int64
	done    chan struct{}
}

// newTracker tracks the entities whose index want marks, among n.
func newTracker(from int64, want []bool) *tracker {
	t := &tracker{from: from, want: want, first: make([]atomic.Int64, len(want)), done: make(chan struct{})}
	for _, w := range want {
		if w {
			t.pending.Add(1)
		}
	}
	if t.pending.Load() == 0 {
		close(t.done)
	}
	return t
}

// answered notes a successful call to entity i.
func (t *tracker) answered(i int, start, end int64) {
	if start < t.from || !t.want[i] || !t.first[i].CompareAndSwap(0, end) {
		return
	}
	if t.pending.Add(-1) == 0 {
		close(t.done)
	}
}

// gaps returns, per tracked entity that answered, the time in ms from
// the tracker's start to its first answer.
func (t *tracker) gaps() []float64 {
	var out []float64
	for i, w := range t.want {
		if end := t.first[i].Load(); w && end != 0 {
			out = append(out, ms(time.Duration(end-t.from)))
		}
	}
	return out
}

// latencies returns the samples' latencies in µs.
func latencies(ss []sample) []float64 {
	us := make([]float64, len(ss))
	for i, s := range ss {
		us[i] = float64(s.end-s.start) / 1e3
	}
	return us
}

// between returns the samples that returned in [from, to].
func between(ss []sample, from, to int64) []sample {
	var out []sample
	for _, s := range ss {
		if s.end >= from && s.end <= to {
			out = append(out, s)
		}
	}
	return out
}
