package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/storage"
)

// stateOps counts the requests runners make on state objects, by
// operation, and can hold back the commit of a completed task (a crash
// between the state write and the task commit).
type stateOps struct {
	storage.ObjectStore
	mu     sync.Mutex
	counts map[string]int
	// holdCommits, while set, blocks every write of a completed task until
	// its context ends.
	holdCommits atomic.Bool
	// loseReply, while set, has the next write of a state object land and
	// then fail, as a write whose answer was lost does.
	loseReply atomic.Bool
	// lateWrite, while set, has the next write of a state object fail at
	// once, as a request its client gave up on does, and land only when
	// the test calls landLate: S3 finishing a request it had received.
	lateWrite atomic.Bool
	late      chan func() error
	held      chan struct{} // receives once per held commit
}

// landLate lands the write lateWrite held back and returns its outcome.
func (s *stateOps) landLate(t *testing.T) error {
	t.Helper()
	select {
	case land := <-s.late:
		return land()
	case <-time.After(10 * time.Second):
		t.Fatal("no state write was held back")
		return nil
	}
}

func (s *stateOps) count(op, key string) {
	if !strings.HasPrefix(key, state.Prefix) {
		return
	}
	s.mu.Lock()
	s.counts[op]++
	s.mu.Unlock()
}

// take returns the counts since the last take.
func (s *stateOps) take() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.counts
	s.counts = map[string]int{}
	return out
}

func (s *stateOps) Get(ctx context.Context, key string) (storage.Object, error) {
	s.count("get", key)
	return s.ObjectStore.Get(ctx, key)
}

func (s *stateOps) Create(ctx context.Context, key string, body []byte) (string, error) {
	s.count("put", key)
	return s.ObjectStore.Create(ctx, key, body)
}

func (s *stateOps) Replace(ctx context.Context, key string, body []byte, ifMatch string) (string, error) {
	s.count("put", key)
	if s.holdCommits.Load() && strings.HasPrefix(key, task.TasksPrefix) && strings.Contains(string(body), `"status":"completed"`) {
		s.held <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	}
	if strings.HasPrefix(key, state.Prefix) && s.lateWrite.CompareAndSwap(true, false) {
		inner := s.ObjectStore
		s.late <- func() error {
			_, err := inner.Replace(context.Background(), key, body, ifMatch)
			return err
		}
		return "", &storage.OpError{Op: "replace", Key: key, Err: fmt.Errorf("%w: no answer within the deadline", storage.ErrUnavailable)}
	}
	etag, err := s.ObjectStore.Replace(ctx, key, body, ifMatch)
	if err == nil && strings.HasPrefix(key, state.Prefix) && s.loseReply.CompareAndSwap(true, false) {
		return "", &storage.OpError{Op: "replace", Key: key, Err: fmt.Errorf("%w: the answer was lost", storage.ErrUnavailable)}
	}
	return etag, err
}

// stateEnv is an env on one shard (every entity shares it) whose bare
// hosts count their state requests.
func stateEnv(t *testing.T) (*env, *stateOps) {
	e := newEnv(t, 1)
	_, e.definedCounter = onDefined.Load(t)
	ops := &stateOps{counts: map[string]int{}, held: make(chan struct{}, 8), late: make(chan func() error, 1)}
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
		ops.ObjectStore = s
		return ops
	}
	return e, ops
}

var shard0 = storage.ShardID{Group: storage.DefaultGroup, Index: 0}

type counterState struct {
	Total int `json:"total"`
}

// stateCounter is a durable counter: a call or task {"add":n} adds n and
// saves; {"fail":true} saves then fails; {"read":true} answers the total.
type stateCounter struct {
	st   *State[counterState]
	runs *atomic.Int32
}

type counterIn struct {
	Add  int  `json:"add"`
	Fail bool `json:"fail"`
	// Read: only answer the total (no save; a defined counter saves only
	// a change anyway).
	Read bool `json:"read"`
}

func (c *stateCounter) apply(ctx context.Context, body []byte) ([]byte, error) {
	c.runs.Add(1)
	var in counterIn
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	if in.Read {
		return json.Marshal(c.st.Get())
	}
	c.st.Get().Total += in.Add
	if err := c.st.Save(ctx); err != nil {
		// Not added: memory must not keep what S3 may not have (as the
		// built-in counter does).
		c.st.Get().Total -= in.Add
		return nil, err
	}
	if in.Fail {
		return nil, errors.New("asked to fail")
	}
	return json.Marshal(c.st.Get())
}

func (c *stateCounter) Receive(ctx context.Context, m *Message) ([]byte, error) {
	return c.apply(ctx, m.Body)
}

func (c *stateCounter) Handle(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	return c.apply(ctx, t.Input)
}

// definedCounter is stateCounter as a type made by Define: its Total is
// its state, saved by the host after an Add that changed it.
type definedCounter struct {
	Total int `json:"total"`
	runs  *atomic.Int32
}

// Add adds in.Add; with in.Fail it fails after the change, which the
// host then drops (unlike stateCounter, which saved first).
func (c *definedCounter) Add(_ Context, in counterIn) (counterState, error) {
	c.runs.Add(1)
	c.Total += in.Add
	if in.Fail {
		return counterState{}, errors.New("asked to fail")
	}
	return counterState{Total: c.Total}, nil
}

// onDefined holds the tests TestStateOnDefinedTypes runs again with the
// counter made by Define (stateEnv reads it).
var onDefined sync.Map // *testing.T → struct{}

// TestStateOnDefinedTypes runs the durable state tests again with the
// counter a type made by Define, whose state the host saves: the same
// fences, request counts and exactly-once effect of tasks.
func TestStateOnDefinedTypes(t *testing.T) {
	for _, c := range []struct {
		name string
		test func(*testing.T)
	}{
		{"SurvivesPassivation", TestStateSurvivesPassivation},
		{"WriteOfUnknownOutcomeReloads", TestStateWriteOfUnknownOutcomeReloads},
		{"WriteLandingLateIsRefused", TestStateWriteLandingLateIsRefused},
		{"WriteLandingLateAfterReattach", TestStateWriteLandingLateAfterReattach},
		{"WriteLandingLateAfterLockReturns", TestStateWriteLandingLateAfterLockReturns},
		{"StaleOwnerFenced", TestStateStaleOwnerFenced},
		{"HandoffAndCrash", TestStateHandoffAndCrash},
		{"TaskExactlyOnce", TestStateTaskExactlyOnce},
		{"TaskFailureDropsStaged", TestStateTaskFailureDropsStaged},
		{"WriteBehind", TestStateWriteBehind},
	} {
		t.Run(c.name, func(t *testing.T) {
			onDefined.Store(t, struct{}{})
			defer onDefined.Delete(t)
			c.test(t)
		})
	}
}

// counterHost is a bare host with the durable counter registered as
// "counter" and, written behind by behind, as "lazy": a stateCounter, or
// a definedCounter on an env of TestStateOnDefinedTypes.
func (e *env) counterHost(runs *atomic.Int32, behind time.Duration) *bareHost {
	if e.definedCounter {
		e.t.Log("the counter is a type made by Define")
		return e.bareHost(func(h *Host) {
			mk := func(string) *definedCounter { return &definedCounter{runs: runs} }
			if err := h.Define(Define("counter", mk, Default("Add"))); err != nil {
				e.t.Fatal(err)
			}
			if err := h.Define(Define("lazy", mk, Default("Add"), SaveBehind(behind))); err != nil {
				e.t.Fatal(err)
			}
		})
	}
	return e.bareHost(func(h *Host) {
		mk := func(_ string, st *State[counterState]) (Entity, error) { return &stateCounter{st: st, runs: runs}, nil }
		if err := h.Register("counter", Stateful(mk)); err != nil {
			e.t.Fatal(err)
		}
		if err := h.Register("lazy", Stateful(mk, WriteBehind(behind))); err != nil {
			e.t.Fatal(err)
		}
	})
}

// stored reads the entity's state object from S3.
func (e *env) stored(typ, id string) *state.Envelope {
	e.t.Helper()
	env, _, err := state.NewStore(e.tasks.Objects()).Get(ctxFor(e.t, 10*time.Second), shard0, typ, id)
	if err != nil {
		e.t.Fatalf("state of %s/%s: %v", typ, id, err)
	}
	return env
}

func total(t testing.TB, env *state.Envelope) int {
	t.Helper()
	var s counterState
	if err := json.Unmarshal(env.State, &s); err != nil {
		t.Fatalf("state %s: %v", env.State, err)
	}
	return s.Total
}

func mustCall(t testing.TB, b *bareHost, typ, id, body, want string) {
	t.Helper()
	got, err := b.call(ctxFor(t, 10*time.Second), typ, id, body)
	if err != nil || got != want {
		t.Fatalf("call %s/%s %s = %q, %v; want %q", typ, id, body, got, err, want)
	}
}

// TestStateSurvivesPassivation: calls save the counter; it survives
// passivation; the requests per activation and per save are counted at
// the object store.
func TestStateSurvivesPassivation(t *testing.T) {
	e, ops := stateEnv(t)
	var runs atomic.Int32
	b := e.counterHost(&runs, 0)
	b.own(shard0, 100)

	mustCall(t, b, "counter", "c1", `{"add":2}`, `{"total":2}`)
	if got := ops.take(); got["get"] != 1 || got["put"] != 2 {
		t.Fatalf("first activation and save: %v, want 1 GET (404) + 1 Create + 1 PUT", got)
	}
	mustCall(t, b, "counter", "c1", `{"add":3}`, `{"total":5}`)
	if got := ops.take(); got["get"] != 0 || got["put"] != 1 {
		t.Fatalf("a save: %v, want 1 PUT", got)
	}
	t.Logf("requests: activation of a new entity 1 GET + 1 PUT, a save 1 PUT")

	b.resident.passivateIdle(b.Host, time.Now())
	if n := b.resident.len(); n != 0 {
		t.Fatalf("%d resident after passivation", n)
	}
	mustCall(t, b, "counter", "c1", `{"add":1}`, `{"total":6}`)
	if got := ops.take(); got["get"] != 1 || got["put"] != 1 {
		t.Fatalf("reactivation under the same epoch and a save: %v, want 1 GET + 1 PUT", got)
	}
	if env := e.stored("counter", "c1"); total(t, env) != 6 || env.Epoch != 100 || env.Rev != 4 {
		t.Fatalf("stored: %+v", env)
	}
	if v := testutil.ToFloat64(b.metrics.stateLoads[stateAbsent]); v != 1 {
		t.Fatalf("absent loads = %v, want 1", v)
	}
}

// TestStateWriteOfUnknownOutcomeReloads: a save that landed in S3 but
// whose answer was lost leaves the counter's memory without the add (it
// cannot know); the instance is then read again before its next turn, so
// that the next call answers what S3 holds, not the memory.
func TestStateWriteOfUnknownOutcomeReloads(t *testing.T) {
	e, ops := stateEnv(t)
	var runs atomic.Int32
	b := e.counterHost(&runs, 0)
	b.own(shard0, 100)
	mustCall(t, b, "counter", "c1", `{"add":1}`, `{"total":1}`)
	ops.loseReply.Store(true)
	if got, err := b.call(ctxFor(t, 10*time.Second), "counter", "c1", `{"add":2}`); err == nil {
		t.Fatalf("a save whose answer was lost: %q, want an error", got)
	}
	if env := e.stored("counter", "c1"); total(t, env) != 3 {
		t.Fatalf("stored total %d, want 3: the lost answer's write landed", total(t, env))
	}
	ops.take()
	mustCall(t, b, "counter", "c1", `{"add":0}`, `{"total":3}`)
	if got := ops.take(); got["get"] != 1 {
		t.Fatalf("the call after the unknown write: %v, want 1 GET (the state read again)", got)
	}
	mustCall(t, b, "counter", "c1", `{"add":1}`, `{"total":4}`)
	if env := e.stored("counter", "c1"); total(t, env) != 4 {
		t.Fatalf("stored total %d, want 4", total(t, env))
	}
}

// TestStateWriteLandingLateIsRefused: a save the runner gave up on (its
// request sent, no answer in time) that S3 applies only after the entity
// was activated again, under the same epoch. The activation writes the
// object back (a refence), so the late write is refused by its If-Match
// and what a call reads is what S3 holds. With a read alone, the late
// write lands after it: S3 then holds an add that the memory, and every
// later read, lacks (the failure TestCallOutcomesUnderFaults once saw).
func TestStateWriteLandingLateIsRefused(t *testing.T) {
	e, ops := stateEnv(t)
	var runs atomic.Int32
	b := e.counterHost(&runs, 0)
	b.own(shard0, 100)
	mustCall(t, b, "counter", "c1", `{"add":1}`, `{"total":1}`)
	ops.lateWrite.Store(true)
	if got, err := b.call(ctxFor(t, 10*time.Second), "counter", "c1", `{"add":2}`); err == nil {
		t.Fatalf("a save with no answer: %q, want an error", got)
	}
	ops.take()
	mustCall(t, b, "counter", "c1", `{"read":true}`, `{"total":1}`)
	if got := ops.take(); got["get"] != 1 || got["put"] != 1 {
		t.Fatalf("the activation after a save of unknown outcome: %v, want 1 GET + 1 PUT (a refence)", got)
	}
	if err := ops.landLate(t); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("the late write: %v, want refused by its If-Match (the refence changed the ETag)", err)
	}
	stored := total(t, e.stored("counter", "c1"))
	mustCall(t, b, "counter", "c1", `{"read":true}`, fmt.Sprintf(`{"total":%d}`, stored))
	if got := ops.take(); len(got) != 0 {
		t.Fatalf("a read after the refence: %v, want no request", got)
	}
	mustCall(t, b, "counter", "c1", `{"add":4}`, `{"total":5}`)
	if got := total(t, e.stored("counter", "c1")); got != 5 {
		t.Fatalf("stored total %d, want 5", got)
	}
	if v := testutil.ToFloat64(b.metrics.stateRefences); v != 1 {
		t.Fatalf("refences = %v, want 1", v)
	}
	if n := b.doubts.len(); n != 0 {
		t.Fatalf("%d objects still in doubt after the refence", n)
	}
}

// TestStateWriteLandingLateAfterReattach: the same across a detachment
// that keeps the lock. A save in flight when the runner detaches is cut
// off; the shard is owned again under the same epoch (a new ownership),
// and the entity's first activation there refences the object, so the
// save that S3 applies afterwards is refused.
func TestStateWriteLandingLateAfterReattach(t *testing.T) {
	lateWriteAcrossEpochReturn(t, sharding.LossDetached)
}

// TestStateWriteLandingLateAfterLockReturns: the same when the ownership
// ended for a reason that seems to end the epoch, and the epoch came back
// all the same: a lock lost to a polled store's listing that missed it
// (the lease still held it, and the runner acquires it again at its
// epoch), and a planned release whose lock delete failed (the lock stays
// held, and is acquired again at its epoch if the shard is assigned back).
// The doubts of the ended ownership must outlive it in both.
func TestStateWriteLandingLateAfterLockReturns(t *testing.T) {
	lateWriteAcrossEpochReturn(t, sharding.LossLockLost)
	lateWriteAcrossEpochReturn(t, sharding.LossReleased)
}

// lateWriteAcrossEpochReturn: a save of unknown outcome, the ownership
// ended for reason, the shard owned again under the same epoch; the
// first activation must refence, and the late save be refused.
func lateWriteAcrossEpochReturn(t *testing.T, reason sharding.LossReason) {
	t.Helper()
	e, ops := stateEnv(t)
	var runs atomic.Int32
	b := e.counterHost(&runs, 0)
	o := b.own(shard0, 100)
	mustCall(t, b, "counter", "c1", `{"add":1}`, `{"total":1}`)
	ops.lateWrite.Store(true)
	if _, err := b.call(ctxFor(t, 10*time.Second), "counter", "c1", `{"add":2}`); err == nil {
		t.Fatalf("%s: a save with no answer succeeded", reason)
	}
	o.end(reason)
	if reason == sharding.LossReleased {
		b.ShardReleasing(ctxFor(t, 10*time.Second), o.Ownership)
	} else {
		b.ShardLost(o.Ownership, reason)
	}
	b.own(shard0, 100)
	ops.take()
	mustCall(t, b, "counter", "c1", `{"read":true}`, `{"total":1}`)
	if got := ops.take(); got["get"] != 1 || got["put"] != 1 {
		t.Fatalf("%s: the first activation under the same epoch again: %v, want 1 GET + 1 PUT (a refence)", reason, got)
	}
	if err := ops.landLate(t); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("%s: the late write: %v, want refused", reason, err)
	}
	mustCall(t, b, "counter", "c1", `{"read":true}`, fmt.Sprintf(`{"total":%d}`, total(t, e.stored("counter", "c1"))))
}

// TestStateStaleOwnerFenced: a successor (higher epoch) activates the
// entity; the old owner's resident instance then saves: refused with
// ErrStateFenced, the object unchanged, and the old owner no longer
// activates the entity (not-owner refusal).
func TestStateStaleOwnerFenced(t *testing.T) {
	e, ops := stateEnv(t)
	var runs atomic.Int32
	old, next := e.counterHost(&runs, 0), e.counterHost(&runs, 0)
	old.own(shard0, 100)
	mustCall(t, old, "counter", "c1", `{"add":1}`, `{"total":1}`)

	next.own(shard0, 101)
	ops.take()
	mustCall(t, next, "counter", "c1", `{"add":10}`, `{"total":11}`)
	if got := ops.take(); got["get"] != 1 || got["put"] != 2 {
		t.Fatalf("activation by a new ownership and a save: %v, want 1 GET + 1 PUT (fence) + 1 PUT", got)
	}
	before := e.stored("counter", "c1")

	_, err := old.call(ctxFor(t, 10*time.Second), "counter", "c1", `{"add":100}`)
	var fe *state.FencedError
	if !errors.Is(err, ErrStateFenced) || !errors.As(err, &fe) || fe.Epoch != 100 || fe.Stored != 101 {
		t.Fatalf("stale owner's save: %v, want ErrStateFenced 100 < 101", err)
	}
	after := e.stored("counter", "c1")
	if after.Rev != before.Rev || total(t, after) != 11 || after.Epoch != 101 {
		t.Fatalf("object changed by the stale save: %+v, was %+v", after, before)
	}
	// Its instance was discarded; activating again is refused.
	_, err = old.call(ctxFor(t, 10*time.Second), "counter", "c1", `{"add":100}`)
	var re *RefusedError
	if !errors.As(err, &re) || re.Reason != RefusedNotOwner {
		t.Fatalf("stale owner's activation: %v, want a not-owner refusal", err)
	}
	if v := testutil.ToFloat64(old.metrics.stateSaves[stateConflict]); v != 1 {
		t.Fatalf("conflicts = %v, want 1", v)
	}
	if total(t, e.stored("counter", "c1")) != 11 {
		t.Fatal("object changed")
	}
}

// TestStateHandoffAndCrash: the state survives a planned release and a
// lost shard, taken over by another host under a higher epoch.
func TestStateHandoffAndCrash(t *testing.T) {
	e, _ := stateEnv(t)
	var runs atomic.Int32
	a, b, c := e.counterHost(&runs, 0), e.counterHost(&runs, 0), e.counterHost(&runs, 0)
	oa := a.own(shard0, 100)
	mustCall(t, a, "counter", "c1", `{"add":1}`, `{"total":1}`)
	oa.end(sharding.LossReleased)
	a.ShardReleasing(ctxFor(t, 10*time.Second), oa.Ownership)

	ob := b.own(shard0, 101)
	mustCall(t, b, "counter", "c1", `{"add":1}`, `{"total":2}`)
	ob.end(sharding.LossLockLost)
	b.ShardLost(ob.Ownership, sharding.LossLockLost)

	c.own(shard0, 102)
	mustCall(t, c, "counter", "c1", `{"add":1}`, `{"total":3}`)
	if env := e.stored("counter", "c1"); env.Epoch != 102 || total(t, env) != 3 {
		t.Fatalf("stored: %+v", env)
	}
}

// TestStateTaskExactlyOnce: a task's state is written with its id before
// its completion is committed; the owner crashes in between (its commit
// held until the shard is lost), and the successor completes the task
// with the recorded result without running the handler again.
func TestStateTaskExactlyOnce(t *testing.T) {
	e, ops := stateEnv(t)
	var runs atomic.Int32
	a, b := e.counterHost(&runs, 0), e.counterHost(&runs, 0)
	ops.holdCommits.Store(true)
	oa := a.own(shard0, 100)
	tk := e.submit(task.SubmitRequest{Type: "counter", Entity: "c1", Input: json.RawMessage(`{"add":5}`)})
	select {
	case <-ops.held:
	case <-ctxFor(t, 20*time.Second).Done():
		t.Fatal("the task's commit never came")
	}
	if env := e.stored("counter", "c1"); total(t, env) != 5 || len(env.Applied) != 1 || env.Applied[0].Task != tk.ID {
		t.Fatalf("state before the commit: %+v", env)
	}
	oa.end(sharding.LossLockLost)
	a.ShardLost(oa.Ownership, sharding.LossLockLost)
	ops.holdCommits.Store(false)

	b.own(shard0, 101)
	done := e.final(tk.Ref(), 30*time.Second)
	if done.Status != task.Completed || string(done.Result) != `{"total":5}` {
		t.Fatalf("task: %s %s", done.Status, done.Result)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if env := e.stored("counter", "c1"); total(t, env) != 5 || env.Epoch != 101 {
		t.Fatalf("stored: %+v", env)
	}
}

// TestStateTaskFailureDropsStaged: a failing task's saved state is not
// written, and the instance is discarded (the retry reloads).
func TestStateTaskFailureDropsStaged(t *testing.T) {
	e, _ := stateEnv(t)
	var runs atomic.Int32
	b := e.counterHost(&runs, 0)
	b.own(shard0, 100)
	mustCall(t, b, "counter", "c1", `{"add":1}`, `{"total":1}`)
	tk := e.submit(task.SubmitRequest{Type: "counter", Entity: "c1", Input: json.RawMessage(`{"add":5,"fail":true}`), MaxAttempts: 1})
	if done := e.final(tk.Ref(), 30*time.Second); done.Status != task.Failed {
		t.Fatalf("task: %s", done.Status)
	}
	if env := e.stored("counter", "c1"); total(t, env) != 1 {
		t.Fatalf("a failed task's state was written: %s", env.State)
	}
	// The discarded instance's memory (6) is gone: the next call reloads.
	mustCall(t, b, "counter", "c1", `{"add":1}`, `{"total":2}`)
}

// TestStateWriteBehind: saves coalesce; passivation and a planned release
// flush; a lost shard does not; a short delay flushes by itself.
func TestStateWriteBehind(t *testing.T) {
	e, ops := stateEnv(t)
	var runs atomic.Int32
	a := e.counterHost(&runs, time.Hour)
	oa := a.own(shard0, 100)
	for range 10 {
		if _, err := a.call(ctxFor(t, 10*time.Second), "lazy", "w", `{"add":1}`); err != nil {
			t.Fatal(err)
		}
	}
	if got := ops.take(); got["put"] != 1 {
		t.Fatalf("10 saves written behind: %v, want only the activation's Create", got)
	}
	a.resident.passivateIdle(a.Host, time.Now())
	if got := ops.take(); got["put"] != 1 {
		t.Fatalf("passivation: %v, want 1 PUT", got)
	}
	if n := total(t, e.stored("lazy", "w")); n != 10 {
		t.Fatalf("after passivation: total %d", n)
	}

	mustCall(t, a, "lazy", "w", `{"add":1}`, `{"total":11}`)
	oa.end(sharding.LossReleased)
	a.ShardReleasing(ctxFor(t, 10*time.Second), oa.Ownership)
	if n := total(t, e.stored("lazy", "w")); n != 11 {
		t.Fatalf("after release: total %d, want 11", n)
	}

	b := e.counterHost(&runs, time.Hour)
	ob := b.own(shard0, 101)
	mustCall(t, b, "lazy", "w", `{"add":1}`, `{"total":12}`)
	ob.end(sharding.LossLockLost)
	b.ShardLost(ob.Ownership, sharding.LossLockLost)
	testenv.WaitFor(t, "the lost shard's executor to stop", 10*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.execs) == 0
	})
	if n := total(t, e.stored("lazy", "w")); n != 11 {
		t.Fatalf("after a loss: total %d, want 11 (nothing flushed)", n)
	}

	c := e.counterHost(&runs, 20*time.Millisecond)
	c.own(shard0, 102)
	mustCall(t, c, "lazy", "w", `{"add":1}`, `{"total":12}`)
	testenv.WaitFor(t, "the write-behind flush", 10*time.Second, func() bool { return total(t, e.stored("lazy", "w")) == 12 })
}

// TestStateLimits: a state over MaxStateSize is refused with a clear error
// and nothing written; a corrupt object refuses its entity, naming the
// key, while another entity of the same shard works.
func TestStateLimits(t *testing.T) {
	e, _ := stateEnv(t)
	e.ecfg.MaxStateSize = 16
	var runs atomic.Int32
	b := e.counterHost(&runs, 0)
	b.own(shard0, 100)
	mustCall(t, b, "counter", "c1", `{"add":1}`, `{"total":1}`)
	_, err := b.call(ctxFor(t, 10*time.Second), "counter", "c1", `{"add":1000000000000}`)
	var tl *state.TooLargeError
	if !errors.Is(err, ErrStateTooLarge) || !errors.As(err, &tl) || tl.Limit != 16 {
		t.Fatalf("big save: %v", err)
	}
	if n := total(t, e.stored("counter", "c1")); n != 1 {
		t.Fatalf("stored total %d after a refused save", n)
	}

	key := state.Key(shard0, "counter", "bad")
	if _, err := e.tasks.Objects().Put(ctxFor(t, 10*time.Second), key, []byte(`{"type":"counter","id":"bad",`)); err != nil {
		t.Fatal(err)
	}
	_, err = b.call(ctxFor(t, 10*time.Second), "counter", "bad", `{"add":1}`)
	if !errors.Is(err, ErrStateCorrupt) || !strings.Contains(err.Error(), key) {
		t.Fatalf("corrupt: %v, want ErrStateCorrupt naming %s", err, key)
	}
	mustCall(t, b, "counter", "c2", `{"add":1}`, `{"total":1}`)
	if v := testutil.ToFloat64(b.metrics.stateLoads[stateCorrupt]); v != 1 {
		t.Fatalf("corrupt loads = %v", v)
	}
	// The operator deletes it; the entity starts afresh.
	if err := state.NewStore(e.tasks.Objects()).Delete(ctxFor(t, 10*time.Second), shard0, "counter", "bad"); err != nil {
		t.Fatal(err)
	}
	mustCall(t, b, "counter", "bad", `{"add":1}`, `{"total":1}`)
}

// typedCounter is the durable counter as a typed handler; {"clear":true}
// clears the state.
type typedCounter struct{ st *State[counterState] }

func (c *typedCounter) Handle(ctx context.Context, _ *task.Task, in struct {
	Add   int  `json:"add"`
	Clear bool `json:"clear"`
}) (counterState, error) {
	if in.Clear {
		return counterState{}, c.st.Clear(ctx)
	}
	c.st.Get().Total += in.Add
	return *c.st.Get(), c.st.Save(ctx)
}

// TestStateTypedAndClear: StatefulHandler adapts a typed handler; Clear
// stores null and keeps the fence (the object stays, its epoch recorded).
func TestStateTypedAndClear(t *testing.T) {
	e, _ := stateEnv(t)
	b := e.bareHost(func(h *Host) {
		f := StatefulHandler(func(_ string, st *State[counterState]) (Handler[struct {
			Add   int  `json:"add"`
			Clear bool `json:"clear"`
		}, counterState], error) {
			return &typedCounter{st: st}, nil
		})
		if err := h.Register("typed", f); err != nil {
			t.Fatal(err)
		}
	})
	b.own(shard0, 100)
	mustCall(t, b, "typed", "t1", `{"add":4}`, `{"total":4}`)
	mustCall(t, b, "typed", "t1", `{"clear":true}`, `{"total":0}`)
	env := e.stored("typed", "t1")
	if env.HasState() || env.Epoch != 100 || env.Rev != 3 {
		t.Fatalf("after Clear: %+v, want null state, epoch 100, rev 3", env)
	}
	b.resident.passivateIdle(b.Host, time.Now())
	mustCall(t, b, "typed", "t1", `{"add":1}`, `{"total":1}`)
}
