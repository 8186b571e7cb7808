package entity

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is a test cluster: one etcd namespace and one S3 bucket (see
// package harness), shared by runners started in this process, each with
// its own etcd connection through a proxy (to partition it) and its own
// task store.
type env struct {
	*harness.Cluster
	t testing.TB
	// definedCounter: counterHost registers the counter made by Define
	// (TestStateOnDefinedTypes).
	definedCounter bool
	srv            *testenv.Etcd
	ops            *opCounter
	tasks          *task.Store // the submitters' store
	client         *task.Client
	rec            *recorder
	scfg           sharding.Config
	ecfg           Config
	logs           *logSink
	// wrap, if set, decorates each runner's object store (fault injection
	// over the real S3 server).
	wrap func(runner string, s storage.ObjectStore) storage.ObjectStore
	// skew, if set before runners start, moves the S3 clock of every task
	// store made afterwards (the submitters' e.tasks excepted) ahead by the
	// duration it holds, read on every call: tests age tasks without
	// waiting.
	skew *atomic.Int64

	nodes harness.Members[*node]
	// hostOpts, if set, add options to every host started afterwards.
	hostOpts func(n *node) []Option
}

// node is one runner: manager and host.
type node struct {
	*harness.Run
	id          string
	env         *env
	proxy       *testenv.Proxy
	rs          *etcd.Store
	mgr         *sharding.Manager
	host        *Host
	reg         *prometheus.Registry
	transitions harness.Transitions
}

func testShardingConfig() sharding.Config { return testShardingConfigFor(2 * time.Second) }

// loadLeaseTTL is the lease TTL of the tests that load the machine on
// purpose (thousands of tasks, many submitters). A 2 s lease cuts off
// 1.33 s after the last keep-alive answer, which a race-built test process
// on a busy 2-core machine misses every few seconds; the runner then
// detaches, as it must, and each re-attachment's burst of work brings the
// next miss: beside six busy loops a 2 s lease detached 22 times in 48 s,
// a 4 s lease 2–3 times per run (the one forced by the test included).
// The longer lease holds the timing window open; what the tests assert is
// unchanged.
const loadLeaseTTL = 4 * time.Second

// holdLeaseOpen gives e's runners loadLeaseTTL; call it before starting them.
func (e *env) holdLeaseOpen() { e.scfg = testShardingConfigFor(loadLeaseTTL) }

// testShardingConfigFor is the test sharding config for a lease of ttl.
func testShardingConfigFor(ttl time.Duration) sharding.Config {
	cfg := sharding.DefaultConfigFor(ttl)
	cfg.Detachment.RecoverWindow = 500 * time.Millisecond
	cfg.RebalanceDebounce = 50 * time.Millisecond
	cfg.RebalanceInterval = 2 * time.Second
	cfg.AcquireRetryWindow = time.Second
	cfg.InterruptTimeout = 2 * time.Second
	cfg.ProbeInterval = 100 * time.Millisecond
	return cfg
}

func testEntityConfig() Config {
	cfg := DefaultConfig()
	cfg.TaskLease = 3 * time.Second
	cfg.HookTimeout = 2 * time.Second
	cfg.InterruptTimeout = 2 * time.Second // the sharding config's
	return cfg
}

func newEnv(t testing.TB, shards int) *env {
	t.Helper()
	srv, s3 := testenv.SharedEtcd(t), testenv.SharedS3(t)
	ak, sk := s3.Credentials()
	e := &env{
		Cluster: harness.New(t, harness.Spec{Etcd: srv.Endpoint(), Prefix: testenv.Prefix(t),
			Meta: storage.ClusterMeta{Shards: shards, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName},
			S3:   harness.S3{Endpoint: s3.Endpoint(), Region: s3.Region(), AccessKey: ak, SecretKey: sk, Bucket: s3.Bucket(t)}}),
		t:    t,
		srv:  srv,
		ops:  &opCounter{counts: map[string]int{}},
		rec:  &recorder{harness.NewRecorder()},
		scfg: testShardingConfig(),
		ecfg: testEntityConfig(),
		logs: newLogSink(t),
	}
	e.tasks = e.newTaskStore()
	waker, err := e.Store(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	e.client, err = task.NewClient(e.tasks, task.ClientConfig{Shards: shards, Waker: waker, Logger: e.logs.logger("client"),
		Defaults: task.SubmitDefaults{Retry: task.RetryPolicy{Initial: task.Duration(200 * time.Millisecond), Max: task.Duration(2 * time.Second), Multiplier: 2, Jitter: 0.2}}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// newTaskStore opens a task store on the env's bucket, counting requests.
func (e *env) newTaskStore() *task.Store { return e.runnerTaskStore("") }

// runnerTaskStore is newTaskStore for a runner, decorated by e.wrap.
func (e *env) runnerTaskStore(runner string) *task.Store {
	s3 := testenv.SharedS3(e.t)
	var obj storage.ObjectStore
	obj, err := s3store.New(s3.Client(), e.S3.Bucket, s3store.WithPrefix("tenure/test/"), s3store.WithObserver(e.ops.observe))
	if err != nil {
		e.t.Fatal(err)
	}
	if runner != "" && e.wrap != nil {
		obj = e.wrap(runner, obj)
	}
	opts := []task.Option{task.WithLogger(e.logs.logger("tasks"))}
	if skew := e.skew; skew != nil {
		base := obj.ServerTime
		opts = append(opts, task.WithClock(func(ctx context.Context) (storage.ServerTime, error) {
			st, err := base(ctx)
			st.Now = st.Now.Add(time.Duration(skew.Load()))
			return st, err
		}))
	}
	return task.NewStore(obj, opts...)
}

// register is how every runner of a test registers its task types.
type registerFunc func(n *node, h *Host)

func (e *env) start(id string, register registerFunc) *node {
	t := e.t
	t.Helper()
	rs, p, err := e.ProxiedStore(context.Background(), etcd.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := &node{id: id, env: e, proxy: p, rs: rs, reg: prometheus.NewRegistry()}
	opts := []Option{WithRegistry(n.reg), WithLogger(e.logs.logger(id))}
	if e.hostOpts != nil {
		opts = append(opts, e.hostOpts(n)...)
	}
	n.host, err = NewHost(e.runnerTaskStore(id), rs, id, e.ecfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	register(n, n.host)
	self := storage.RunnerInfo{ID: id, Weight: 1, Groups: []string{storage.DefaultGroup}, Version: "test"}
	n.mgr, err = sharding.New(rs, self, e.Meta, e.scfg, sharding.WithHandler(n.host), sharding.WithRegistry(n.reg), sharding.WithLogger(e.logs.logger(id)))
	if err != nil {
		t.Fatal(err)
	}
	n.mgr.Machine().Subscribe(n.transitions.Record)
	n.Run = harness.Go(n.mgr.Run)
	t.Cleanup(n.stop)
	e.nodes.Add(id, n)
	return n
}

// stop shuts the runner down (interrupt, revoke) and closes its host.
func (n *node) stop() {
	if !n.Running() {
		return
	}
	if err := n.Stop(20 * time.Second); errors.Is(err, harness.ErrStopTimeout) {
		n.env.t.Errorf("runner %s did not stop", n.id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.host.Close(ctx); err != nil {
		n.env.t.Errorf("runner %s: %v", n.id, err)
	}
}

// kill cuts the runner off from etcd and stops it: its lease cannot be
// revoked and its running tasks stay claimed, as after a crash.
func (n *node) kill() {
	n.proxy.SetMode(testenv.Blackhole)
	n.stop()
}

func (n *node) detaches() []detachment.Transition { return n.transitions.Of(detachment.Detached) }

// firstDetach is the time of the first detach of any runner of the env,
// zero if none detached.
func (e *env) firstDetach() time.Time {
	var first time.Time
	for _, n := range e.nodes.All() {
		for _, tr := range n.detaches() {
			if first.IsZero() || tr.At.Before(first) {
				first = tr.At
			}
		}
	}
	return first
}

// detachReasons lists every runner's detaches, for the log.
func (e *env) detachReasons() []string {
	var out []string
	for _, n := range e.nodes.All() {
		for _, tr := range n.detaches() {
			out = append(out, fmt.Sprintf("%s: %v at %s (%v)", n.id, tr.Reason, tr.At.Format("05.000000"), tr.Err))
		}
	}
	sort.Strings(out)
	return out
}

// watchOnly sets the timers of runners started afterwards that could move
// a shard without a watch event (the safety pass, the acquire retries)
// past the end of the test (harness.TimersAway): a move within
// harness.WatchBound was then driven by the watches.
func (e *env) watchOnly() {
	e.scfg.AcquireRetryInterval = harness.TimersAway
	e.scfg.RebalanceInterval = harness.TimersAway
}

// watchLocks starts an outside observer of the shard locks, on a
// connection of its own (no runner's proxy), until the test's end.
func (e *env) watchLocks() *harness.LockTimeline {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	st, err := e.Store(ctx, "", etcd.WithRetryBackoff(20*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	return harness.WatchLocks(ctx, st)
}

// members returns the running runners, by id.
func (e *env) members() []*node { return e.nodes.Running() }

// waitSettled waits until the running members own every shard between them
// exactly as assigned, with nothing pending: no handoff is under way.
func (e *env) waitSettled(within time.Duration) {
	e.t.Helper()
	e.waitShards("a settled assignment", within, true)
}

// waitOwned waits until the running members own every shard between them.
func (e *env) waitOwned(within time.Duration) {
	e.t.Helper()
	e.waitShards("every shard owned", within, false)
}

// waitShards waits until the running members are attached and own every
// shard between them, each (if settled) exactly as assigned with nothing
// pending, and each host serves what its manager owns. The manager
// reports a shard owned before it has handed it to the host (ShardAcquired
// follows), so a message delivered on the manager's word alone may be
// refused as not-owner.
func (e *env) waitShards(what string, within time.Duration, settled bool) {
	e.t.Helper()
	testenv.WaitFor(e.t, what, within, func() bool {
		n := 0
		for _, m := range e.members() {
			st := m.mgr.Status()
			if !st.Attached || settled && (len(st.Pending) != 0 || len(st.Owned) != len(st.Assigned)) {
				return false
			}
			for _, o := range st.Owned {
				if x := m.host.route(o.Shard); x == nil || x.own.Epoch != o.Epoch {
					return false
				}
			}
			n += len(st.Owned)
		}
		return n == e.Meta.Shards
	})
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// submit submits a task and fails the test on error.
func (e *env) submit(req task.SubmitRequest) *task.Task {
	e.t.Helper()
	t, _, err := e.client.Submit(ctxFor(e.t, 30*time.Second), req)
	if err != nil {
		e.t.Fatalf("submit %+v: %v", req, err)
	}
	return t
}

// final waits until the task is terminal and returns it.
func (e *env) final(ref string, within time.Duration) *task.Task {
	e.t.Helper()
	t, err := e.client.Wait(ctxFor(e.t, within), ref, 50*time.Millisecond)
	if err != nil {
		e.t.Fatalf("waiting for %s: %v", ref, err)
	}
	return t
}

// opCounter counts S3 requests by operation.
type opCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *opCounter) observe(op string, _ error, _ time.Duration) {
	c.mu.Lock()
	c.counts[op]++
	c.mu.Unlock()
}

func (c *opCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// execution is one handler run, as the handler saw it.
type execution = harness.Execution

// recorder logs every handler run with one clock; its work is the body of
// the test handlers.
type recorder struct{ *harness.Recorder }

// sleepInput is the input of the test handlers.
type sleepInput struct {
	MS    int  `json:"ms,omitempty"`    // run this long (or until cancelled)
	Block bool `json:"block,omitempty"` // run until cancelled
	Fail  int  `json:"fail,omitempty"`  // fail the first Fail attempts
	Perm  bool `json:"perm,omitempty"`  // fail permanently
	Panic bool `json:"panic,omitempty"`
}

func input(v sleepInput) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// work is the body of the test handlers: it records the run, obeys the
// input, and returns {"runner": id, "n": count}.
func (r *recorder) work(ctx context.Context, runner string, t *task.Task, count int) (json.RawMessage, error) {
	x := r.Begin(execution{Runner: runner, TaskID: t.ID, Entity: t.Entity, Attempt: t.Attempt, Ctx: ctx})
	var in sleepInput
	if len(t.Input) > 0 {
		if err := json.Unmarshal(t.Input, &in); err != nil {
			r.Finish(x, err)
			return nil, Permanent(err)
		}
	}
	var err error
	switch {
	case in.Panic:
		r.Finish(x, fmt.Errorf("panic"))
		panic("test handler panics on purpose")
	case in.Perm:
		err = Permanent(fmt.Errorf("permanently broken"))
	case t.Attempt <= in.Fail:
		err = fmt.Errorf("flaky: attempt %d of %d fails", t.Attempt, in.Fail)
	case in.Block:
		<-ctx.Done()
		err = context.Cause(ctx)
		r.Cancelled(x)
	case in.MS > 0:
		select {
		case <-time.After(time.Duration(in.MS) * time.Millisecond):
		case <-ctx.Done():
			err = context.Cause(ctx)
			r.Cancelled(x)
		}
	}
	r.Finish(x, err)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(fmt.Sprintf(`{"runner":%q,"n":%d}`, runner, count)), nil
}

// counterEntity is a stateful test entity: it counts its tasks in memory.
type counterEntity struct {
	rec     *recorder
	runner  string
	id      string
	n       int
	started *atomic.Int64
	stopped *sync.Map // id → []StopReason
}

func (c *counterEntity) Handle(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	c.n++
	return c.rec.work(ctx, c.runner, t, c.n)
}

func (c *counterEntity) OnStart(context.Context) error {
	if c.started != nil {
		c.started.Add(1)
	}
	return nil
}

func (c *counterEntity) OnStop(_ context.Context, reason StopReason) {
	if c.stopped != nil {
		v, _ := c.stopped.LoadOrStore(c.id, &stopLog{})
		v.(*stopLog).add(reason)
	}
}

type stopLog struct {
	mu      sync.Mutex
	reasons []StopReason
}

func (s *stopLog) add(r StopReason) {
	s.mu.Lock()
	s.reasons = append(s.reasons, r)
	s.mu.Unlock()
}

// standard registers "counter" (a stateful entity) and "job" (entity-less).
func (e *env) standard(n *node, h *Host) {
	if err := h.Register("counter", func(id string) (Entity, error) {
		return &counterEntity{rec: e.rec, runner: n.id, id: id}, nil
	}); err != nil {
		e.t.Fatal(err)
	}
	if err := h.RegisterFunc("job", func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		return e.rec.work(ctx, n.id, t, 0)
	}); err != nil {
		e.t.Fatal(err)
	}
}

// logSink collects every component's logs and prints them if the test
// fails (goroutines may log after the test returns).
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newLogSink(t testing.TB) *logSink {
	s := &logSink{}
	t.Cleanup(func() {
		// A refused state transition (mailbox turn, attempt stage,
		// executor phase) is a bug, whatever the test checks.
		s.mu.Lock()
		refused := bytes.Contains(s.buf.Bytes(), []byte("refused a mailbox turn transition")) ||
			bytes.Contains(s.buf.Bytes(), []byte("refused an attempt stage transition")) ||
			bytes.Contains(s.buf.Bytes(), []byte("refused a shard executor phase transition"))
		s.mu.Unlock()
		if refused {
			t.Errorf("an illegal state transition was refused (see the logs)")
		}
		if t.Failed() {
			s.mu.Lock()
			defer s.mu.Unlock()
			out := s.buf.Bytes()
			if len(out) > 200<<10 {
				out = out[len(out)-200<<10:]
			}
			t.Logf("logs (tail):\n%s", out)
		}
	})
	return s
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) logger(name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(s, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", name)
}
