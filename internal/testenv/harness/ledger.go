package harness

import (
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Span is one ownership of a shard by a runner, as the runner's handler
// saw it.
type Span struct {
	Runner     string
	Shard      storage.ShardID
	Epoch      int64
	Start, End time.Time // End zero while owned
	Reason     string    // why it ended
}

// Ledger records every ownership of every runner of a cluster, with one
// clock, as the runners' handlers report acquisitions and ends. Its check,
// Overlaps, is that no shard is owned by two runners at once.
type Ledger struct {
	mu    sync.Mutex
	spans []Span
	open  map[string]map[storage.ShardID]int // runner → shard → index of its open span
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{open: map[string]map[storage.ShardID]int{}} }

// Acquired opens a span: runner owns shard under epoch from now. It panics
// if runner already has one open for shard: a handler was told of an
// ownership twice without its end, a bug of the layer under test that no
// later check would see.
func (l *Ledger) Acquired(runner string, shard storage.ShardID, epoch int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[runner] == nil {
		l.open[runner] = map[storage.ShardID]int{}
	}
	if _, dup := l.open[runner][shard]; dup {
		panic(fmt.Sprintf("%s: shard %s acquired twice without an end", runner, shard))
	}
	l.open[runner][shard] = len(l.spans)
	l.spans = append(l.spans, Span{Runner: runner, Shard: shard, Epoch: epoch, Start: time.Now()})
}

// Ended closes runner's span of shard under epoch, now, for reason. It
// panics if no such span is open: an end reported for an ownership never
// reported.
func (l *Ledger) Ended(runner string, shard storage.ShardID, epoch int64, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, ok := l.open[runner][shard]
	if !ok || l.spans[i].Epoch != epoch {
		panic(fmt.Sprintf("%s: end of shard %s epoch %d that was not acquired", runner, shard, epoch))
	}
	l.spans[i].End, l.spans[i].Reason = time.Now(), reason
	delete(l.open[runner], shard)
}

// Spans returns every span, in order of acquisition.
func (l *Ledger) Spans() []Span { return l.spansFrom(time.Time{}) }

// AcquiredAfter returns the spans started at or after t.
func (l *Ledger) AcquiredAfter(t time.Time) []Span { return l.spansFrom(t) }

func (l *Ledger) spansFrom(t time.Time) []Span {
	l.mu.Lock()
	defer l.mu.Unlock()
	return since(l.spans, func(s Span) time.Time { return s.Start }, t)
}

// since returns the items of xs stamped at or after t, in order.
func since[T any](xs []T, stamp func(T) time.Time, t time.Time) []T {
	var out []T
	for _, x := range xs {
		if !stamp(x).Before(t) {
			out = append(out, x)
		}
	}
	return out
}

// Handovers measures, for every span of runner that ended for reason at
// or after since, the gap from its end to the next span of the same shard
// by another runner. It returns how many such spans there were and the
// gaps found, in order of acquisition (a span with no successor has none).
func (l *Ledger) Handovers(runner, reason string, since time.Time) (ended int, gaps []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.spans {
		if a.Runner != runner || a.Reason != reason || a.End.Before(since) {
			continue
		}
		ended++
		for _, b := range l.spans {
			if b.Shard == a.Shard && b.Runner != runner && !b.Start.Before(a.End) {
				gaps = append(gaps, b.Start.Sub(a.End))
				break
			}
		}
	}
	return ended, gaps
}

// Overlaps describes every two runners' spans of one shard that overlap in
// time: none, if no shard was owned twice at once. Spans start when the
// handler learns of the ownership (after the lock was taken) and end when
// it learns of its end (after the ownership's context was cancelled), so
// a real overlap can only look longer here, never vanish.
func (l *Ledger) Overlaps() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	by := map[storage.ShardID][]Span{}
	for _, s := range l.spans {
		by[s.Shard] = append(by[s.Shard], s)
	}
	var out []string
	for shard, ss := range by {
		for i, a := range ss {
			for _, b := range ss[i+1:] {
				if a.Runner == b.Runner {
					continue
				}
				aEnd, bEnd := a.End, b.End
				if aEnd.IsZero() {
					aEnd = time.Now()
				}
				if bEnd.IsZero() {
					bEnd = time.Now()
				}
				if a.Start.Before(bEnd) && b.Start.Before(aEnd) {
					out = append(out, fmt.Sprintf("shard %s owned by %s [%v, %v) and %s [%v, %v) at once",
						shard, a.Runner, a.Start.Format("15:04:05.000"), a.End.Format("15:04:05.000"),
						b.Runner, b.Start.Format("15:04:05.000"), b.End.Format("15:04:05.000")))
				}
			}
		}
	}
	return out
}
