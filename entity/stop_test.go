package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

// ledgerEntity keeps a count of its completed tasks in memory, loads it
// from S3 when it starts and saves it there when it stops: the pattern of a
// service that keeps entity state in its own storage. Its OnStop is slow,
// as an S3 write under load can be.
type ledgerEntity struct {
	id, runner string
	state      storage.ObjectStore
	n          int
}

// ledgerInput: the task's place in its entity's sequence, and whether to
// block (until interrupted) when run on a given runner.
type ledgerInput struct {
	Seq     int    `json:"seq"`
	BlockOn string `json:"block_on,omitempty"`
}

func (l *ledgerEntity) OnStart(ctx context.Context) error {
	obj, err := l.state.Get(ctx, "ledger/"+l.id)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		l.n = 0
	case err != nil:
		return err
	default:
		n, err := strconv.Atoi(string(obj.Body))
		if err != nil {
			return err
		}
		l.n = n
	}
	return nil
}

func (l *ledgerEntity) Handle(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	var in ledgerInput
	if err := json.Unmarshal(t.Input, &in); err != nil {
		return nil, Permanent(err)
	}
	if in.BlockOn == l.runner {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	l.n++ // counted only when the task completes here
	return json.Marshal(map[string]int{"seq": in.Seq, "n": l.n})
}

func (l *ledgerEntity) OnStop(ctx context.Context, reason StopReason) {
	select { // a slow store
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		return
	}
	if _, err := l.state.Put(ctx, "ledger/"+l.id, []byte(strconv.Itoa(l.n))); err != nil {
		panic(fmt.Sprintf("ledger %s: saving on stop (%s): %v", l.id, reason, err))
	}
}

// TestOnStopSeenBySuccessor: over planned hand-overs, every effect of the
// previous owner's OnStop is visible to the successor's first message. Each
// entity's next task is running on the old owner when the hand-over starts
// (it blocks there until interrupted), so the successor runs it the moment
// it gets the shard; its OnStart must read the count the old owner's OnStop
// saved, whence the task's count equals its place in the sequence.
func TestOnStopSeenBySuccessor(t *testing.T) {
	e := newEnv(t, 4)
	e.scfg.InterruptTimeout = 5 * time.Second
	e.ecfg.InterruptTimeout = 5 * time.Second
	s3 := testenv.SharedS3(t)
	state, err := s3store.New(s3.Client(), e.S3.Bucket, s3store.WithPrefix("tenure/test-ledger/"))
	if err != nil {
		t.Fatal(err)
	}
	register := func(n *node, h *Host) {
		if err := h.Register("ledger", func(id string) (Entity, error) {
			return &ledgerEntity{id: id, runner: n.id, state: state}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	entities := []string{"a", "b", "c", "d", "e", "f"}
	seq := 0
	var refs []string
	submit := func(blockOn string) []string {
		seq++
		var round []string
		for _, id := range entities {
			in, _ := json.Marshal(ledgerInput{Seq: seq, BlockOn: blockOn})
			round = append(round, e.submit(task.SubmitRequest{Type: "ledger", Entity: id, Input: in, MaxAttempts: 5}).Ref())
		}
		refs = append(refs, round...)
		return round
	}
	waitDone := func(round []string) {
		for _, ref := range round {
			if got := e.final(ref, 30*time.Second); got.Status != task.Completed {
				t.Fatalf("%s ended %s: %s", ref, got.Status, got.Error)
			}
		}
	}

	owners := []*node{e.start("own1", register)}
	e.waitOwned(10 * time.Second)
	waitDone(submit(""))
	waitDone(submit(""))
	for round, next := range []string{"own2", "own3"} {
		old := owners[len(owners)-1]
		// The old owner runs every entity's next task, blocked.
		blocked := submit(old.id)
		testenv.WaitFor(t, "every entity's task running on "+old.id, 20*time.Second, func() bool {
			return testutil.ToFloat64(old.host.metrics.running) == float64(len(entities))
		})
		owners = append(owners, e.start(next, register))
		if err := old.mgr.Drain(ctxFor(t, 30*time.Second)); err != nil {
			t.Fatalf("round %d: drain %s: %v", round, old.id, err)
		}
		waitDone(blocked)
		waitDone(submit(""))
		old.stop()
	}
	// Every completed task counted exactly its place in the sequence.
	for _, ref := range refs {
		tk := e.final(ref, 10*time.Second)
		var in ledgerInput
		var out struct{ Seq, N int }
		if err := json.Unmarshal(tk.Input, &in); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(tk.Result, &out); err != nil {
			t.Fatalf("%s result %s: %v", ref, tk.Result, err)
		}
		if out.N != in.Seq {
			t.Errorf("entity %s task %d counted %d: the successor did not see what OnStop saved", tk.Entity, in.Seq, out.N)
		}
	}
}

// stubborn is a handler that ignores its context until released.
type stubborn struct {
	mu      sync.Mutex
	started map[string]int // task id → runs started
	release chan struct{}
}

func newStubborn() *stubborn {
	return &stubborn{started: map[string]int{}, release: make(chan struct{})}
}

func (s *stubborn) handle(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	s.mu.Lock()
	s.started[t.ID]++
	s.mu.Unlock()
	<-s.release
	return nil, nil
}

func (s *stubborn) runs(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started[id]
}

// TestInterruptOverrunsCountedAndNamed: after a detachment and after a lost
// lock, the runner waits interrupt_timeout for its handlers, then counts
// (tenure_tasks_interrupt_overruns_total) and names in its log (task ref,
// type, how long) the ones still running; a handler that honours its
// context is not counted. A task whose handler still runs is not started a
// second time on the same runner when it gets the shard back.
func TestInterruptOverrunsCountedAndNamed(t *testing.T) {
	for _, path := range []string{"detach", "lock-loss"} {
		t.Run(path, func(t *testing.T) {
			e := newEnv(t, 1)
			stub := newStubborn()
			n := e.start("solo", func(n *node, h *Host) {
				e.standard(n, h)
				if err := h.RegisterFunc("stubborn", stub.handle); err != nil {
					t.Fatal(err)
				}
			})
			defer close(stub.release)
			e.waitOwned(10 * time.Second)
			tk := e.submit(task.SubmitRequest{Type: "stubborn"})
			e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Block: true})})
			testenv.WaitFor(t, "both handlers running", 10*time.Second, func() bool {
				return stub.runs(tk.ID) == 1 && e.rec.Starts() == 1
			})
			interrupted := time.Now()
			switch path {
			case "detach":
				n.proxy.SetMode(testenv.Blackhole)
				testenv.WaitFor(t, "the runner to detach", 10*time.Second, func() bool { return len(n.detaches()) > 0 })
			case "lock-loss":
				// Someone deletes the lock while the runner is attached.
				cli := e.srv.Client(t)
				ctx := ctxFor(t, 5*time.Second)
				if _, err := cli.Delete(ctx, e.Prefix+"shards/", clientv3.WithPrefix()); err != nil {
					t.Fatal(err)
				}
			}
			overruns := func() float64 { return testutil.ToFloat64(n.host.metrics.stuck) }
			overrunLine := func() string {
				line := ""
				for _, l := range strings.Split(e.logs.String(), "\n") {
					if strings.Contains(l, "handler still running after the interrupt wait") {
						line = l
					}
				}
				return line
			}
			testenv.WaitFor(t, "the overrun to be counted", 10*time.Second, func() bool { return overruns() >= 1 })
			waited := time.Since(interrupted)
			// The log names it before the count shows it.
			line := overrunLine()
			if waited < e.ecfg.InterruptTimeout {
				t.Errorf("counted %s after the interruption; the wait is %s", waited, e.ecfg.InterruptTimeout)
			}
			if got := overruns(); got != 1 {
				t.Errorf("%v overruns counted; want 1 (the polite handler returned)", got)
			}
			for _, want := range []string{"task=" + tk.Ref(), "type=stubborn", "running_for="} {
				if !strings.Contains(line, want) {
					t.Errorf("overrun log line %q lacks %q", line, want)
				}
			}
			if path == "lock-loss" {
				// The runner takes its shard back; the task, whose
				// handler still runs here, is not started again.
				testenv.WaitFor(t, "the shard owned again", 10*time.Second, func() bool { return len(n.mgr.Owned()) == 1 })
				testenv.WaitFor(t, "the polite task to run again", 10*time.Second, func() bool { return e.rec.Starts() >= 2 })
				if r := stub.runs(tk.ID); r != 1 {
					t.Errorf("the stubborn task started %d times while its first handler ran", r)
				}
			}
		})
	}
}

// TestStopRevokesAfterHandlersReturn: on stop (no drain) the runner revokes
// its lease, which frees its locks at once, only after its handlers have
// returned: a handler that honours its context, but takes a while to, is
// not still running when a successor could take its shard. The lock's
// deletion is observed in etcd by the test.
func TestStopRevokesAfterHandlersReturn(t *testing.T) {
	e := newEnv(t, 1)
	var mu sync.Mutex
	var returned time.Time
	running := make(chan struct{})
	n := e.start("stopper", func(n *node, h *Host) {
		if err := h.RegisterFunc("slowstop", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			close(running)
			<-ctx.Done()
			time.Sleep(700 * time.Millisecond) // cleaning up after the interruption
			mu.Lock()
			returned = time.Now()
			mu.Unlock()
			return nil, context.Cause(ctx)
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitOwned(10 * time.Second)
	e.submit(task.SubmitRequest{Type: "slowstop", MaxAttempts: 1})
	waitClosed(t, running, "the handler to run")
	cli := e.srv.Client(t)
	cur, err := cli.Get(ctxFor(t, 5*time.Second), e.Prefix+"shards/", clientv3.WithPrefix())
	if err != nil || len(cur.Kvs) != 1 {
		t.Fatalf("the lock: %v %v", cur, err)
	}
	watch := cli.Watch(ctxFor(t, 30*time.Second), e.Prefix+"shards/", clientv3.WithPrefix(), clientv3.WithRev(cur.Header.Revision+1))
	freedc := make(chan time.Time, 1)
	go func() {
		for resp := range watch {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					freedc <- time.Now() // stamped as it arrives
					return
				}
			}
		}
	}()
	n.stop()
	var freed time.Time
	select {
	case freed = <-freedc:
	case <-time.After(20 * time.Second):
		t.Fatal("the lock was not freed")
	}
	mu.Lock()
	defer mu.Unlock()
	if returned.IsZero() || freed.Before(returned) {
		t.Fatalf("the lock was freed at %s, the handler returned at %s: a successor could have run the task meanwhile",
			freed.Format("05.000"), returned.Format("05.000"))
	}
	t.Logf("handler returned %s before the lock was freed", freed.Sub(returned))
}

// String returns everything logged so far.
func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
