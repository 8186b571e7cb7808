package entity

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is a test cluster: one etcd namespace and one S3 bucket, shared by
// runners started in this process, each with its own etcd connection
// through a proxy (to partition it) and its own task store.
type env struct {
	t      testing.TB
	srv    *testenv.Etcd
	ns     string
	meta   storage.ClusterMeta
	bucket string
	ops    *opCounter
	tasks  *task.Store // the submitters' store
	client *task.Client
	rec    *recorder
	scfg   sharding.Config
	ecfg   Config
	logs   *logSink
	// wrap, if set, decorates each runner's object store (fault injection
	// over the real S3 server).
	wrap func(runner string, s storage.ObjectStore) storage.ObjectStore
	// skew, if set before runners start, moves the S3 clock of every task
	// store made afterwards (the submitters' e.tasks excepted) ahead by the
	// duration it holds, read on every call: tests age tasks without
	// waiting.
	skew *atomic.Int64

	mu    sync.Mutex
	nodes map[string]*node
}

// node is one runner: manager and host.
type node struct {
	id     string
	env    *env
	proxy  *testenv.Proxy
	rs     *etcd.Store
	mgr    *sharding.Manager
	host   *Host
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error

	mu          sync.Mutex
	transitions []detachment.Transition
}

func testShardingConfig() sharding.Config {
	cfg := sharding.DefaultConfigFor(2 * time.Second)
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
	s3 := testenv.SharedS3(t)
	e := &env{
		t:      t,
		srv:    testenv.SharedEtcd(t),
		ns:     testenv.Prefix(t),
		meta:   storage.ClusterMeta{Shards: shards, Groups: []string{storage.DefaultGroup}, Hash: sharding.HashName},
		bucket: s3.Bucket(t),
		ops:    &opCounter{counts: map[string]int{}},
		rec:    newRecorder(),
		scfg:   testShardingConfig(),
		ecfg:   testEntityConfig(),
		logs:   newLogSink(t),
		nodes:  map[string]*node{},
	}
	e.tasks = e.newTaskStore()
	waker, err := etcd.New(e.srv.Client(t), etcd.WithPrefix(e.ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waker.Close() })
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
	obj, err := s3store.New(s3.Client(), e.bucket, s3store.WithPrefix("tenure/test/"), s3store.WithObserver(e.ops.observe))
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
	u, err := url.Parse(e.srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewProxy(t, u.Host)
	cli := testenv.ClientAt(t, "http://"+p.Addr())
	rs, err := etcd.New(cli, etcd.WithPrefix(e.ns), etcd.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	n := &node{id: id, env: e, proxy: p, rs: rs, reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	n.host, err = NewHost(e.runnerTaskStore(id), rs, id, e.ecfg, WithRegistry(n.reg), WithLogger(e.logs.logger(id)))
	if err != nil {
		t.Fatal(err)
	}
	register(n, n.host)
	self := storage.RunnerInfo{ID: id, Weight: 1, Groups: []string{storage.DefaultGroup}, Version: "test"}
	n.mgr, err = sharding.New(rs, self, e.meta, e.scfg, sharding.WithHandler(n.host), sharding.WithRegistry(n.reg), sharding.WithLogger(e.logs.logger(id)))
	if err != nil {
		t.Fatal(err)
	}
	n.mgr.Machine().Subscribe(func(tr detachment.Transition) {
		n.mu.Lock()
		n.transitions = append(n.transitions, tr)
		n.mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- n.mgr.Run(ctx) }()
	t.Cleanup(func() { n.stop() })
	e.mu.Lock()
	e.nodes[id] = n
	e.mu.Unlock()
	return n
}

// stop shuts the runner down (interrupt, revoke) and closes its host.
func (n *node) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	select {
	case <-n.done:
	case <-time.After(20 * time.Second):
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

func (n *node) detaches() []detachment.Transition {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []detachment.Transition
	for _, tr := range n.transitions {
		if tr.Kind == detachment.Detached {
			out = append(out, tr)
		}
	}
	return out
}

// firstDetach is the time of the first detach of any runner of the env,
// zero if none detached.
func (e *env) firstDetach() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	var first time.Time
	for _, n := range e.nodes {
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
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, n := range e.nodes {
		for _, tr := range n.detaches() {
			out = append(out, fmt.Sprintf("%s: %v at %s (%v)", n.id, tr.Reason, tr.At.Format("05.000000"), tr.Err))
		}
	}
	sort.Strings(out)
	return out
}

func (e *env) members() []*node {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*node
	for _, n := range e.nodes {
		if n.cancel != nil {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// waitSettled waits until the running members own every shard between them
// exactly as assigned, with nothing pending: no handoff is under way.
func (e *env) waitSettled(within time.Duration) {
	e.t.Helper()
	testenv.WaitFor(e.t, "a settled assignment", within, func() bool {
		n := 0
		for _, m := range e.members() {
			st := m.mgr.Status()
			if !st.Attached || len(st.Pending) != 0 || len(st.Owned) != len(st.Assigned) {
				return false
			}
			n += len(st.Owned)
		}
		return n == e.meta.Shards
	})
}

// waitOwned waits until the running members own every shard between them.
func (e *env) waitOwned(within time.Duration) {
	e.t.Helper()
	testenv.WaitFor(e.t, "every shard owned", within, func() bool {
		n := 0
		for _, m := range e.members() {
			st := m.mgr.Status()
			if !st.Attached {
				return false
			}
			n += len(st.Owned)
		}
		return n == e.meta.Shards
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
type execution struct {
	runner, taskID, entity string
	attempt                int
	start, end             time.Time
	cancelledAt            time.Time // when its context ended, if before end
	err                    error
	// ctx is the handler's context: whether it has ended can be read at
	// once, before the AfterFunc setting cancelledAt has run.
	ctx context.Context
}

// recorder logs every handler run with one clock.
type recorder struct {
	mu     sync.Mutex
	runs   []*execution
	starts atomic.Int64
}

func newRecorder() *recorder { return &recorder{} }

// begin records a handler start and watches its context.
func (r *recorder) begin(ctx context.Context, runner string, t *task.Task) *execution {
	x := &execution{runner: runner, taskID: t.ID, entity: t.Entity, attempt: t.Attempt, start: time.Now(), ctx: ctx}
	r.mu.Lock()
	r.runs = append(r.runs, x)
	r.mu.Unlock()
	r.starts.Add(1)
	context.AfterFunc(ctx, func() {
		r.mu.Lock()
		if x.end.IsZero() {
			x.cancelledAt = time.Now()
		}
		r.mu.Unlock()
	})
	return x
}

// cancelled notes that the run saw its context end (the AfterFunc may not
// have run yet).
func (r *recorder) cancelled(x *execution) {
	r.mu.Lock()
	if x.cancelledAt.IsZero() {
		x.cancelledAt = time.Now()
	}
	r.mu.Unlock()
}

func (r *recorder) finish(x *execution, err error) {
	r.mu.Lock()
	x.end, x.err = time.Now(), err
	r.mu.Unlock()
}

// finishedTasks counts the tasks with at least one run that ended without
// an error.
func (r *recorder) finishedTasks() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := make(map[string]bool, len(r.runs))
	for _, x := range r.runs {
		if !x.end.IsZero() && x.err == nil {
			done[x.taskID] = true
		}
	}
	return len(done)
}

func (r *recorder) all() []execution {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]execution, len(r.runs))
	for i, x := range r.runs {
		out[i] = *x
	}
	return out
}

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
	x := r.begin(ctx, runner, t)
	var in sleepInput
	if len(t.Input) > 0 {
		if err := json.Unmarshal(t.Input, &in); err != nil {
			r.finish(x, err)
			return nil, Permanent(err)
		}
	}
	var err error
	switch {
	case in.Panic:
		r.finish(x, fmt.Errorf("panic"))
		panic("test handler panics on purpose")
	case in.Perm:
		err = Permanent(fmt.Errorf("permanently broken"))
	case t.Attempt <= in.Fail:
		err = fmt.Errorf("flaky: attempt %d of %d fails", t.Attempt, in.Fail)
	case in.Block:
		<-ctx.Done()
		err = context.Cause(ctx)
		r.cancelled(x)
	case in.MS > 0:
		select {
		case <-time.After(time.Duration(in.MS) * time.Millisecond):
		case <-ctx.Done():
			err = context.Cause(ctx)
			r.cancelled(x)
		}
	}
	r.finish(x, err)
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
