package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

// The proof of durable entity state with `tenure run` processes: the
// built-in counter (type "counter": {"add": N} adds, {} reads,
// the reply {"total": T}) gets 1,000 increments of +1 over 10 counters on
// 3 runners, half as idempotent tasks and half as calls, while one runner
// is killed (SIGKILL), one drained (SIGTERM) and one cut from etcd. Each
// counter's final total, read by a call and from its state object in S3,
// holds every acknowledged increment and none twice: acknowledged ≤ total
// ≤ acknowledged + the calls whose outcome is unknown.

const (
	counterType = "counter"
	counterOps  = 1000
	counterIDs  = 10
	// counterPace spaces the increments' starts, so that the faults fall
	// in the middle of the load rather than after it.
	counterPace = 25 * time.Millisecond
)

// counterLedger is what the callers know of each counter.
type counterLedger struct {
	mu      sync.Mutex
	acked   map[string]int     // counter → increments acknowledged (completed tasks, answered calls)
	unknown map[string]int     // counter → calls whose outcome is unknown
	totals  map[string][]int64 // counter → the totals acknowledged increments replied
	errs    map[string]int     // call error kind → count
	tasks   map[string]string  // task ref → counter
	failed  []string           // tasks that ended otherwise than completed
}

func newCounterLedger() *counterLedger {
	return &counterLedger{acked: map[string]int{}, unknown: map[string]int{}, totals: map[string][]int64{},
		errs: map[string]int{}, tasks: map[string]string{}}
}

// ack records an acknowledged increment of id with its reply.
func (l *counterLedger) ack(t *testing.T, id string, reply []byte) {
	var r struct {
		Total *int64 `json:"total"`
	}
	if err := json.Unmarshal(reply, &r); err != nil || r.Total == nil {
		t.Errorf("counter %s replied %q: want {\"total\": T}", id, reply)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[id]++
	l.totals[id] = append(l.totals[id], *r.Total)
}

// counterCall increments id by a call; an error leaves its outcome
// unknown (the call may have run), and it is not retried.
func counterCall(t *testing.T, cli *runner.Client, l *counterLedger, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := cli.Call(ctx, counterType, id, []byte(`{"add":1}`))
	if err == nil {
		l.ack(t, id, reply)
		return
	}
	l.mu.Lock()
	l.unknown[id]++
	l.errs[callErrorKind(err)]++
	l.mu.Unlock()
}

// counterSubmit submits an increment of id as task taskID, submitting
// again under the same id while the outcome of a submit is unknown (an
// error): the id makes a second task impossible.
func counterSubmit(t *testing.T, tasks *task.Client, l *counterLedger, id, taskID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := task.SubmitRequest{ID: taskID, Type: counterType, Entity: id, Input: json.RawMessage(`{"add":1}`), MaxAttempts: 50}
	for {
		tk, _, err := tasks.Submit(ctx, req)
		if err == nil {
			l.mu.Lock()
			l.tasks[tk.Ref()] = id
			l.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			t.Errorf("submit %s: %v", taskID, err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // back off before submitting again
		}
	}
}

// settleTasks waits for every submitted task to end and records the
// completed ones as acknowledged.
func (l *counterLedger) settleTasks(t *testing.T, tasks *task.Client) {
	l.mu.Lock()
	refs := make([]string, 0, len(l.tasks))
	for ref := range l.tasks {
		refs = append(refs, ref)
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	harness.ForEach(len(refs), 16, func(i int) {
		ref := refs[i]
		l.mu.Lock()
		id := l.tasks[ref]
		l.mu.Unlock()
		tk, err := tasks.Wait(ctx, ref, 100*time.Millisecond)
		switch {
		case err != nil:
			t.Errorf("task %s of %s not terminal: %v", ref, id, err)
		case tk.Status == task.Completed:
			l.ack(t, id, tk.Result)
		default:
			l.mu.Lock()
			l.failed = append(l.failed, fmt.Sprintf("%s of %s: %s: %s", ref, id, tk.Status, tk.Error))
			l.mu.Unlock()
		}
	})
}

// readCounter reads id's total by a call ({}), retrying failed reads (a
// read changes nothing).
func readCounter(t *testing.T, cli *runner.Client, id string) int64 {
	t.Helper()
	var total int64
	err := harness.Await(context.Background(), 30*time.Second, 200*time.Millisecond, func() (bool, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		reply, err := cli.Call(ctx, counterType, id, []byte(`{}`))
		if err != nil {
			return false, err.Error(), nil
		}
		var r struct {
			Total *int64 `json:"total"`
		}
		if err := json.Unmarshal(reply, &r); err != nil || r.Total == nil {
			return false, "", fmt.Errorf("read of %s replied %q", id, reply)
		}
		total = *r.Total
		return true, "", nil
	})
	if err != nil {
		t.Fatalf("reading counter %s: %v", id, err)
	}
	return total
}

// storedCounter reads id's state object in S3: the total it holds.
func storedCounter(t *testing.T, c *cluster, st *state.Store, id string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	env, _, err := st.Get(ctx, task.ShardOf(storage.DefaultGroup, c.Meta.Shards, counterType, id, ""), counterType, id)
	if err != nil {
		t.Fatalf("state of counter %s: %v", id, err)
	}
	var s struct {
		Total int64 `json:"total"`
	}
	if err := json.Unmarshal(env.State, &s); err != nil {
		t.Fatalf("state of counter %s: %q: %v", id, env.State, err)
	}
	return s.Total
}

// stateStore opens the cluster's S3 for reading state objects.
func (c *cluster) stateStore() *state.Store {
	c.t.Helper()
	cfg, err := runner.Load(c.cfgPath, nil, []string{"etcd.endpoints=" + c.Etcd})
	if err != nil {
		c.t.Fatal(err)
	}
	obj, err := runner.OpenObjectStore(context.Background(), cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	return state.NewStore(obj)
}

func TestCounterExactAcrossKillDrainAndPartition(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	c, rs := startCallCluster(t, nil, ids...)
	cli := c.callClient()
	tasks := c.taskClient()
	counters := make([]string, counterIDs)
	for i := range counters {
		counters[i] = fmt.Sprintf("c%d", i)
	}
	l := newCounterLedger()

	// The load: op i increments counter (i/2) % 10, as a task when i is
	// even, as a call when odd; an op starts counterPace after the one
	// before.
	load := startPacedLoad(counterOps, 32, counterPace, func(i int) {
		id := counters[(i/2)%counterIDs]
		if i%2 == 0 {
			counterSubmit(t, tasks, l, id, fmt.Sprintf("inc-%04d", i))
		} else {
			counterCall(t, cli, l, id)
		}
	})
	progress := func(n int, what string) { load.await(t, n, what, 60*time.Second) }
	others := func(r *runnerProc) []string {
		var out []string
		for _, id := range ids {
			if id != r.id {
				out = append(out, id)
			}
		}
		return out
	}

	// SIGKILL at a fifth of the load; the runner comes back once its shards
	// have moved.
	progress(counterOps/5, "the SIGKILL")
	kill := rs[0]
	t.Logf("SIGKILL of %s at %s", kill.id, load.at())
	kill.signal(t, syscall.SIGKILL)
	kill.wait(t, 10*time.Second)
	c.waitAllOwned(others(kill), 20*time.Second)
	c.restart(kill)

	// SIGTERM (drain) at two fifths; it comes back after it exits.
	progress(2*counterOps/5, "the drain")
	drain := rs[1]
	t.Logf("SIGTERM of %s at %s", drain.id, load.at())
	drain.signal(t, syscall.SIGTERM)
	if code := drain.wait(t, 20*time.Second); code != 0 {
		t.Errorf("%s exited %d after SIGTERM, want 0", drain.id, code)
	}
	c.restart(drain)

	// Partition at three fifths, healed once its shards have moved.
	progress(3*counterOps/5, "the partition")
	cut := rs[2]
	t.Logf("partition of %s at %s", cut.id, load.at())
	cut.proxy.SetMode(testenv.Blackhole)
	c.waitAllOwned(others(cut), 30*time.Second)
	cut.proxy.SetMode(testenv.Pass)
	t.Logf("healed %s at %s", cut.id, load.at())

	load.wait()
	t.Logf("load done: %s", load.at())
	l.settleTasks(t, tasks)
	c.waitSettled(rs, 1, 30*time.Second)

	st := c.stateStore()
	var sumAcked, sumUnknown int
	var sumTotal int64
	for _, id := range counters {
		total := readCounter(t, cli, id)
		stored := storedCounter(t, c, st, id)
		acked, unknown := l.acked[id], l.unknown[id]
		sumAcked, sumUnknown, sumTotal = sumAcked+acked, sumUnknown+unknown, sumTotal+total
		t.Logf("counter %s: total %d (S3 %d), acknowledged %d, unknown %d", id, total, stored, acked, unknown)
		if stored != total {
			t.Errorf("counter %s: the call reads %d, its state object holds %d", id, total, stored)
		}
		if total < int64(acked) {
			t.Errorf("counter %s: total %d < %d acknowledged increments: an acknowledged increment was lost", id, total, acked)
		}
		if total > int64(acked+unknown) {
			t.Errorf("counter %s: total %d > %d acknowledged + %d unknown: an increment counted twice", id, total, acked, unknown)
		}
		// Every increment is +1, so each acknowledged one saw a total of
		// its own, at most the final one.
		replies := slices.Sorted(slices.Values(l.totals[id]))
		for i, r := range replies {
			if i > 0 && r == replies[i-1] {
				t.Errorf("counter %s: two acknowledged increments replied the total %d", id, r)
			}
			if r > total || r < 1 {
				t.Errorf("counter %s: an increment replied the total %d, final %d", id, r, total)
			}
		}
	}
	t.Logf("%d increments (%d tasks, %d calls): total %d, acknowledged %d, unknown %d (call errors %v); tasks not completed: %d %v",
		counterOps, len(l.tasks), counterOps-len(l.tasks), sumTotal, sumAcked, sumUnknown, l.errs, len(l.failed), l.failed)
	if sumAcked+sumUnknown+len(l.failed) != counterOps {
		t.Errorf("accounted for %d acknowledged + %d unknown + %d failed increments, want %d", sumAcked, sumUnknown, len(l.failed), counterOps)
	}
}
