package entity

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// The start order of tasks without an entity within one shard.
//
// Such a task's ready pointer is ready/<group>/<index>/<due>_<id>: its due
// time (the submitter's reading of the S3 clock, to the millisecond) and
// then its UUIDv7 id, which sorts by creation. An executor lists the
// pointers in key order, keeps the ones it knows in a heap by (due, id),
// and moves every due one to a first-come first-served start queue, from
// which it starts as many as the per-shard concurrency allows. So a
// backlog starts in (due, id) order, and tasks that reach a busy executor
// through wake-ups queue behind the ones already waiting.
//
// For one submitter (one task.Client), (due, id) order is submission
// order: its ids grow in the process, and its submission times, read from
// its estimate of the S3 clock, never run backwards, although the estimate
// itself steps back (by milliseconds, by over a hundred while it is young)
// whenever a Date header narrows it. The tests below hold the start order
// to the submission order, and check that the keys agree.

// discoveryTasks is the number of tasks each test queues: with a listing
// page of discoveryPage keys, the backlog spans several LIST pages.
const (
	discoveryTasks = 50
	discoveryPage  = 7
)

// seqInput is the input of the "seq" test handler.
type seqInput struct {
	Seq int `json:"seq"`
	// Gate holds the first attempt until the test opens the gate.
	Gate bool `json:"gate,omitempty"`
	// FailFirst fails the first attempt (a retryable error).
	FailFirst bool `json:"fail_first,omitempty"`
}

// seqStart is one handler call as the handler saw it.
type seqStart struct{ seq, attempt int }

// startLog records the handler calls in the order they began.
type startLog struct {
	mu     sync.Mutex
	starts []seqStart
}

func (l *startLog) add(s seqStart) {
	l.mu.Lock()
	l.starts = append(l.starts, s)
	l.mu.Unlock()
}

func (l *startLog) all() []seqStart {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seqStart(nil), l.starts...)
}

func (l *startLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.starts)
}

// seqGate is a channel the test closes once; closing it again is a no-op, so
// that a cleanup can open it for a test that failed before it did.
type seqGate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate(t *testing.T) *seqGate {
	g := &seqGate{ch: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *seqGate) open() { g.once.Do(func() { close(g.ch) }) }

// registerSeq registers the entity-less type "seq": it records its start
// first thing (the handler's own view of the order), then obeys its input.
func registerSeq(t *testing.T, log *startLog, g *seqGate) registerFunc {
	return func(_ *node, h *Host) {
		err := h.RegisterFunc("seq", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			var in seqInput
			if err := json.Unmarshal(tk.Input, &in); err != nil {
				return nil, Permanent(err)
			}
			log.add(seqStart{seq: in.Seq, attempt: tk.Attempt})
			if in.Gate && tk.Attempt == 1 {
				select {
				case <-g.ch:
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}
			if in.FailFirst && tk.Attempt == 1 {
				return nil, errors.New("first attempt fails on purpose")
			}
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// pagedPointers caps every listing of ready pointers at limit keys a page
// (S3 returns up to 1000), so that a backlog of a few dozen tasks is
// discovered across several LIST pages, and counts those pages.
type pagedPointers struct {
	storage.ObjectStore
	limit int
	pages atomic.Int64
}

func (p *pagedPointers) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListPage, error) {
	if strings.HasPrefix(prefix, task.ReadyPrefix) {
		p.pages.Add(1)
		if opts.Limit == 0 || opts.Limit > p.limit {
			opts.Limit = p.limit
		}
	}
	return p.ObjectStore.List(ctx, prefix, opts)
}

// submitSeq submits n tasks of type "seq" without an entity, numbered from
// first, one after the other, and returns them in submission order.
func submitSeq(e *env, first, n int, in seqInput) []*task.Task {
	e.t.Helper()
	out := make([]*task.Task, 0, n)
	for i := range n {
		in.Seq = first + i
		b, _ := json.Marshal(in)
		out = append(out, e.submit(task.SubmitRequest{Type: "seq", Input: b}))
	}
	return out
}

// keysInSubmissionOrder fails the test unless every task's ready pointer
// sorts after the one submitted before it: the order a shard's LIST
// returns is the submission order.
func keysInSubmissionOrder(t *testing.T, tasks []*task.Task) {
	t.Helper()
	for i := 1; i < len(tasks); i++ {
		if a, b := tasks[i-1], tasks[i]; b.PointerKey() <= a.PointerKey() {
			t.Fatalf("task %d's pointer %s sorts before task %d's %s, submitted earlier by the same client",
				seqOf(t, b), b.PointerKey(), seqOf(t, a), a.PointerKey())
		}
	}
}

// seqs returns the sequence numbers of first attempts, in start order, and
// fails the test if a task ran more than once or an attempt other than the
// first ran.
func seqs(t *testing.T, starts []seqStart) []int {
	t.Helper()
	seen := map[int]bool{}
	var out []int
	for _, s := range starts {
		if s.attempt != 1 || seen[s.seq] {
			t.Fatalf("task %d started again (attempt %d); starts %v", s.seq, s.attempt, starts)
		}
		seen[s.seq] = true
		out = append(out, s.seq)
	}
	return out
}

// TestEntitylessBacklogStartsOldestFirst: tasks without an entity that
// wait in a shard before any runner owns it start, with one handler a
// shard, oldest first (in submission order, which is their ready
// pointers' key order), although the owner discovers them across several
// LIST pages.
func TestEntitylessBacklogStartsOldestFirst(t *testing.T) {
	e := newEnv(t, 1)
	e.ecfg.MaxConcurrentPerShard = 1
	paged := &pagedPointers{limit: discoveryPage}
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
		paged.ObjectStore = s
		return paged
	}
	// Submitted with no runner: their wake-ups reach nobody, so the owner
	// finds them only by listing the shard when it acquires it.
	tasks := submitSeq(e, 0, discoveryTasks, seqInput{})
	for _, tk := range tasks {
		if tk.Shard != tasks[0].Shard {
			t.Fatalf("task %s is on shard %s, not %s", tk.Ref(), tk.Shard, tasks[0].Shard)
		}
	}
	keysInSubmissionOrder(t, tasks)

	log := &startLog{}
	e.start("solo", registerSeq(t, log, nil))
	testenv.WaitFor(t, "every task to start", 60*time.Second, func() bool { return log.len() >= len(tasks) })
	got := seqs(t, log.all())

	for i, seq := range got {
		if seq != i {
			t.Fatalf("start %d was task %d, want task %d (submission order)\nstarted %v", i, seq, i, got)
		}
	}
	// Every task of the backlog was listed in pages of discoveryPage
	// keys: the order above held across page boundaries.
	if want := int64((len(tasks) + discoveryPage - 1) / discoveryPage); paged.pages.Load() < want {
		t.Fatalf("the ready pointers were listed in %d pages, want at least %d", paged.pages.Load(), want)
	}
	t.Logf("%d tasks started in submission order; %d LIST pages of ready pointers", len(got), paged.pages.Load())
	if last := e.final(tasks[got[len(got)-1]].Ref(), 30*time.Second); last.Status != task.Completed {
		t.Fatalf("the last task ended %s", last.Status)
	}
}

// TestEntitylessWakeupsStartOldestFirst: tasks without an entity that
// reach a runner through wake-ups while its only handler slot for the
// shard is busy queue behind one another and, once the slot frees, start
// oldest first, in submission order.
func TestEntitylessWakeupsStartOldestFirst(t *testing.T) {
	e := newEnv(t, 1)
	e.ecfg.MaxConcurrentPerShard = 1
	log := &startLog{}
	g := newGate(t)
	n := e.start("solo", registerSeq(t, log, g))
	e.waitOwned(10 * time.Second)

	busy := submitSeq(e, 0, 1, seqInput{Gate: true})[0]
	testenv.WaitFor(t, "the first task to hold the shard's one slot", 20*time.Second, func() bool { return log.len() == 1 })
	tasks := submitSeq(e, 1, discoveryTasks, seqInput{})
	keysInSubmissionOrder(t, tasks)
	// Each is queued by its wake-up, without a LIST, while the slot is
	// busy: wait until all of them are in the start queue.
	shard := busy.Shard
	testenv.WaitFor(t, "every task to be queued behind the busy one", 30*time.Second, func() bool {
		ex := n.host.route(shard)
		if ex == nil {
			return false
		}
		ex.sched.mu.Lock()
		defer ex.sched.mu.Unlock()
		return len(ex.sched.runnable) == len(tasks)
	})
	g.open()
	testenv.WaitFor(t, "every task to start", 60*time.Second, func() bool { return log.len() >= len(tasks)+1 })
	got := seqs(t, log.all())
	if got[0] != 0 {
		t.Fatalf("task %d started first, want the busy one (0); started %v", got[0], got)
	}
	got = got[1:]
	for i, seq := range got {
		if seq != i+1 {
			t.Fatalf("start %d after the busy task was task %d, want task %d (submission order)\nstarted %v", i, seq, i+1, got)
		}
	}
	t.Logf("%d tasks started in submission order", len(got))
	if last := e.final(tasks[len(tasks)-1].Ref(), 30*time.Second); last.Status != task.Completed {
		t.Fatalf("the last task ended %s", last.Status)
	}
}

// TestEntitylessRetryGoesBehindQueuedTasks: a task without an entity whose
// attempt fails does not keep its place. Its retry gets a new due time
// (now plus the backoff) and a new ready pointer, and once that time comes
// it queues behind every task already waiting to start: with one handler
// a shard, the tasks queued behind it when it failed all start before its
// second attempt. (An entity's task, by contrast, keeps its place at the
// head of its entity's mailbox.)
func TestEntitylessRetryGoesBehindQueuedTasks(t *testing.T) {
	e := newEnv(t, 1)
	e.ecfg.MaxConcurrentPerShard = 1
	log := &startLog{}
	g := newGate(t)
	n := e.start("solo", registerSeq(t, log, g))
	e.waitOwned(10 * time.Second)

	failing := submitSeq(e, 0, 1, seqInput{Gate: true, FailFirst: true})[0]
	testenv.WaitFor(t, "the failing task to hold the shard's one slot", 20*time.Second, func() bool { return log.len() == 1 })
	const queued = 5
	tasks := submitSeq(e, 1, queued, seqInput{})
	testenv.WaitFor(t, "the other tasks to be queued behind it", 30*time.Second, func() bool {
		ex := n.host.route(failing.Shard)
		if ex == nil {
			return false
		}
		ex.sched.mu.Lock()
		defer ex.sched.mu.Unlock()
		return len(ex.sched.runnable) == queued
	})
	g.open()
	if got := e.final(failing.Ref(), 30*time.Second); got.Status != task.Completed || got.Attempt != 2 {
		t.Fatalf("the failing task ended %s after %d attempts, want completed after 2", got.Status, got.Attempt)
	}
	testenv.WaitFor(t, "every task to start", 30*time.Second, func() bool { return log.len() >= queued+2 })
	starts := log.all()
	retry := -1
	for i, s := range starts {
		if s.seq == 0 && s.attempt == 2 {
			retry = i
		}
	}
	if retry < 0 {
		t.Fatalf("no second attempt of the failing task among %v", starts)
	}
	// Everything queued when the attempt failed was already in the start
	// queue, and the retry joins the queue at its back.
	if retry != len(starts)-1 {
		t.Fatalf("the retry started at position %d of %d, want last: %v", retry, len(starts), starts)
	}
	// The queued tasks themselves kept submission order among themselves
	// wherever their due times did.
	for i := 1; i+1 < len(starts)-1; i++ {
		a, b := tasks[starts[i].seq-1], tasks[starts[i+1].seq-1]
		if starts[i].seq > starts[i+1].seq && !(a.PointerKey() < b.PointerKey()) {
			t.Fatalf("task %d started before the older task %d: %v", starts[i].seq, starts[i+1].seq, starts)
		}
	}
	t.Logf("starts (seq, attempt): %v", starts)
}

// seqOf returns the sequence number in tk's input.
func seqOf(t *testing.T, tk *task.Task) int {
	t.Helper()
	var in seqInput
	if err := json.Unmarshal(tk.Input, &in); err != nil {
		t.Fatal(err)
	}
	return in.Seq
}
