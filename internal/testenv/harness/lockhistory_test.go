package harness

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// TestLockHistoryJudgesMissedTenures: with etcd's own history of the
// locks, an execution under a tenure the live watch never saw (created and
// deleted while it was cut off; the Record calls below skip it, as a
// re-listing after the break does) is judged by the tenure's end in the
// history against the arrival of any shard's event at or past it (a
// re-listing may show the tenure's own shard unchanged), where
// HeldThroughout flags it outright; one under an epoch
// etcd never had, or had for another runner, is flagged as a tenure that
// never existed; a tenure the watch saw is judged as before, its deletion
// arriving before the end still flagged.
func TestLockHistoryJudgesMissedTenures(t *testing.T) {
	c := New(t, Spec{Etcd: testenv.SharedEtcd(t).Endpoint(), Prefix: testenv.Prefix(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.Store(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	register := func(id string) storage.Session {
		ss, err := st.Register(ctx, storage.RunnerInfo{ID: id, Weight: 1, Groups: []string{storage.DefaultGroup}}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss.Close(context.Background()) })
		return ss
	}
	acquire := func(ss storage.Session, sh storage.ShardID) int64 {
		res, err := ss.AcquireShards(ctx, []storage.ShardID{sh})
		if err != nil || res[0].Status != storage.Acquired {
			t.Fatalf("acquire %s: %+v %v", sh, res, err)
		}
		return res[0].Epoch
	}
	release := func(ss storage.Session, sh storage.ShardID) {
		if err := ss.ReleaseShard(ctx, sh); err != nil {
			t.Fatal(err)
		}
	}
	r, q := register("r"), register("q")

	// In revision order, as etcd's history has them. Seen before the
	// watch is cut off: r's tenure of shard 2, r's first of shard 0, q's
	// of shard 1.
	e6 := acquire(r, shard(2))
	e1 := acquire(r, shard(0))
	e4 := acquire(q, shard(1))
	// While it is cut off (missed): r releases shard 0, takes it again
	// and releases it, and q takes it (the re-listing shows q); q
	// releases shard 1, r takes it and releases it (the re-listing shows
	// it gone, at the listing's revision); r takes shard 3 and holds it
	// (the timeline below is left without it, as if the history were read
	// before the watch showed it);
	// r takes shard 4 and releases it (absent before and after, so the
	// re-listing shows nothing of it).
	release(r, shard(0))
	e2 := acquire(r, shard(0))
	release(r, shard(0))
	e3 := acquire(q, shard(0))
	release(q, shard(1))
	e5 := acquire(r, shard(1))
	release(r, shard(1))
	e7 := acquire(r, shard(3))
	e8 := acquire(r, shard(4))
	release(r, shard(4))
	listing := e8 + 1 // the re-listing's revision
	// After the re-listing, live again: r releases shard 2.
	release(r, shard(2))

	// Executions run an hour ago, before the history is read.
	t0 := time.Now().Add(-time.Hour)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(e storage.LockEvent, rev int64, resync bool) storage.LockEvent {
		e.Revision, e.Resync = rev, resync
		return e
	}
	// Each scenario's live timeline: the re-listing after the break
	// arrives at relisted, shard 2's release at released2.
	timeline := func(relisted, released2 int) *LockTimeline {
		l := NewLockTimeline()
		l.history = st
		l.Record(at(0), ev(put(shard(2), "r", e6), e6, false))
		l.Record(at(0), ev(put(shard(0), "r", e1), e1, false))
		l.Record(at(0), ev(put(shard(1), "q", e4), e4, false))
		l.Record(at(relisted), ev(put(shard(0), "q", e3), e3, true))
		l.Record(at(relisted), ev(del(shard(1)), listing, true))
		l.Record(at(released2), ev(del(shard(2)), listing+1, false))
		return l
	}
	l := timeline(2500, 3000)
	hist, err := l.ReadHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The execution: from 1000 to 2000 ms.
	for _, tc := range []struct {
		name                string
		relisted, released2 int
		sh                  storage.ShardID
		runner              string
		epoch               int64
		held                bool
		why                 string // in the reason when not held
	}{
		{"missed tenure, its end re-listed after the execution", 2500, 3000, shard(0), "r", e2, true, ""},
		{"missed tenure, its end re-listed during the execution", 1500, 3000, shard(0), "r", e2, false, "never showed"},
		{"missed tenure, its end re-listed before the execution", 500, 3000, shard(0), "r", e2, false, "before the execution ended"},
		{"missed tenure, re-listed gone after the execution", 2500, 3000, shard(1), "r", e5, true, ""},
		{"missed tenure, re-listed gone during the execution", 1500, 3000, shard(1), "r", e5, false, "never showed"},
		{"missed tenure, still held", 1500, 3000, shard(3), "r", e7, true, ""},
		// The re-listing shows shard 4 unchanged: only the other shards'
		// events, at its revision, tell that its tenure had ended.
		{"missed tenure, its shard unchanged, re-listed after the execution", 2500, 3000, shard(4), "r", e8, true, ""},
		{"missed tenure, its shard unchanged, re-listed during the execution", 1500, 3000, shard(4), "r", e8, false, "never showed"},
		{"seen tenure, its end re-listed after the execution", 2500, 3000, shard(0), "r", e1, true, ""},
		{"seen tenure, its end re-listed during the execution", 1500, 3000, shard(0), "r", e1, false, "delivered its end"},
		{"seen tenure, released during the execution", 500, 1500, shard(2), "r", e6, false, "delivered its end"},
		{"an epoch etcd never had", 2500, 3000, shard(0), "r", e8 + 1000, false, neverExisted},
		{"another runner's epoch", 2500, 3000, shard(0), "q", e2, false, neverExisted},
		{"another shard's epoch", 2500, 3000, shard(0), "r", e6, false, neverExisted},
	} {
		l := timeline(tc.relisted, tc.released2)
		v := l.Judge(hist, tc.sh, tc.runner, tc.epoch, at(1000), at(2000))
		missed := tc.why != neverExisted && (tc.epoch == e2 || tc.epoch == e5 || tc.epoch == e7 || tc.epoch == e8)
		if v.ByHistory != missed {
			t.Errorf("%s: ByHistory %v, want %v (the live watch never showed the tenure)", tc.name, v.ByHistory, missed)
		}
		if v.Held != tc.held || !strings.Contains(v.Why, tc.why) {
			t.Errorf("%s: held %v (%s), want %v (%q)\nlive:\n%s\netcd:\n%s", tc.name, v.Held, v.Why, tc.held, tc.why, l.Timeline(tc.sh), hist.Describe(tc.sh))
		}
		// Without the history, the verdict is HeldThroughout's: a tenure
		// the watch missed is flagged outright.
		old := l.HeldThroughout(tc.sh, tc.runner, tc.epoch, at(1000), at(2000))
		if nv := l.Judge(nil, tc.sh, tc.runner, tc.epoch, at(1000), at(2000)); nv.Held != old {
			t.Errorf("%s: without the history held %v, HeldThroughout %v", tc.name, nv.Held, old)
		}
		if missed && old {
			t.Errorf("%s: HeldThroughout placed a tenure the watch never showed", tc.name)
		}
	}

	// The report's views: the shard's whole live timeline, and etcd's
	// history with the deleted lock's holder, epoch and lease.
	if got := l.Timeline(shard(0)); strings.Count(got, "\n") != 1 || !strings.Contains(got, "q@") || !strings.Contains(got, "(re-listed)") {
		t.Errorf("live timeline of shard 0:\n%s", got)
	}
	d := hist.Describe(shard(0))
	for _, want := range []string{"delete create_rev", "holder r", "holder q", "lease "} {
		if !strings.Contains(d, want) {
			t.Errorf("etcd history of shard 0 lacks %q:\n%s", want, d)
		}
	}
	if n := strings.Count(d, "\n"); n != 5 {
		t.Errorf("etcd history of shard 0: %d lines, want 5 events and the revision:\n%s", n+1, d)
	}
}

// TestLockHistoryNotForPolledTimelines: a polled timeline (coordination on
// S3) reads no history, and Judge with none is HeldThroughout.
func TestLockHistoryNotForPolledTimelines(t *testing.T) {
	l := NewPolledLockTimeline(200 * time.Millisecond)
	hist, err := l.ReadHistory(context.Background())
	if hist != nil || err != nil {
		t.Fatalf("ReadHistory of a polled timeline: %v, %v; want none", hist, err)
	}
	t0 := time.Unix(1000, 0)
	l.Record(t0.Add(1500*time.Millisecond), put(shard(0), "r", 5))
	if v := l.Judge(hist, shard(0), "r", 5, t0.Add(time.Second), t0.Add(2*time.Second)); v.Held || !strings.Contains(v.Why, "poll lag") {
		t.Fatalf("a tenure observed past the poll lag: %+v, want flagged", v)
	}
}
