package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// auditExec is one execution of a task as the external recorder saw it: the
// recorder is the handler (runners call it through their http: handler).
type auditExec struct {
	taskID, entity, runner string
	shard                  storage.ShardID
	epoch                  int64
	attempt                int
	start, end             time.Time
	cancelled              bool // the runner dropped the request before the work ended
}

// recorder is the audit's HTTP task handler and log, with one clock.
type recorder struct {
	srv *http.Server
	ln  net.Listener

	mu    sync.Mutex
	execs []*auditExec
}

func newRecorder(t testing.TB) *recorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve)}
	go r.srv.Serve(ln)
	t.Cleanup(func() { r.srv.Close() })
	return r
}

func (r *recorder) URL() string { return "http://" + r.ln.Addr().String() + "/task" }

// serve runs a task: it works for the input's ms (or until the runner
// cancels the request) and records the execution.
func (r *recorder) serve(w http.ResponseWriter, req *http.Request) {
	var t task.Task
	if err := json.NewDecoder(req.Body).Decode(&t); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	x := &auditExec{taskID: t.ID, entity: t.Entity, shard: t.Shard, attempt: t.Attempt, start: time.Now()}
	if t.Claim != nil {
		x.runner, x.epoch = t.Claim.RunnerID, t.Claim.Epoch
	}
	r.mu.Lock()
	r.execs = append(r.execs, x)
	r.mu.Unlock()
	var in struct {
		MS int `json:"ms"`
	}
	json.Unmarshal(t.Input, &in)
	select {
	case <-time.After(time.Duration(in.MS) * time.Millisecond):
		r.mu.Lock()
		x.end = time.Now()
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ran_on":%q}`, x.runner)
	case <-req.Context().Done():
		r.mu.Lock()
		x.end, x.cancelled = time.Now(), true
		r.mu.Unlock()
	}
}

func (r *recorder) all() []auditExec {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]auditExec, len(r.execs))
	for i, x := range r.execs {
		out[i] = *x
		if out[i].end.IsZero() {
			out[i].end = time.Now() // still running
		}
	}
	return out
}

// lockLog is the timeline of shard-lock holders, from an etcd watch in the
// test process.
type lockLog struct {
	mu     sync.Mutex
	events map[storage.ShardID][]lockChange
}

type lockChange struct {
	at     time.Time
	holder string // "" when released
	epoch  int64
}

func watchLocks(ctx context.Context, c *cluster) *lockLog {
	l := &lockLog{events: map[storage.ShardID][]lockChange{}}
	ch := c.store.WatchShardLocks(ctx)
	go func() {
		for ev := range ch {
			ch := lockChange{at: time.Now()}
			if ev.Kind == storage.EventPut {
				ch.holder, ch.epoch = ev.Lock.RunnerID, ev.Lock.Epoch
			}
			l.mu.Lock()
			l.events[ev.Shard] = append(l.events[ev.Shard], ch)
			l.mu.Unlock()
		}
	}()
	return l
}

// heldThroughout reports whether runner held shard's lock under epoch from
// before start until at least end (the watch sees changes a little late, so
// this errs towards "held").
func (l *lockLog) heldThroughout(shard storage.ShardID, runner string, epoch int64, start, end time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	var cur lockChange
	for _, ch := range l.events[shard] {
		if ch.at.After(start) {
			if ch.at.Before(end) {
				return false // the lock changed during the execution
			}
			break
		}
		cur = ch
	}
	return cur.holder == runner && cur.epoch == epoch
}

// auditReport is what the audit found.
type auditReport struct {
	executions, cancelled int
	outsideLock           []string // (a) executions while the runner did not hold the shard
	overlaps              []string // (b) overlapping executions of a task or an entity
	notTerminal           []string // (c) tasks that never finished
	completedTwice        []string // (d) tasks whose history completes twice
	completed, failed     int
}

// audit checks the four properties over the recorded executions, the lock
// timeline and the final task objects.
func audit(t testing.TB, c *cluster, execs []auditExec, locks *lockLog, refs []string) auditReport {
	var rep auditReport
	rep.executions = len(execs)
	for _, x := range execs {
		if x.cancelled {
			rep.cancelled++
		}
		if locks != nil && !locks.heldThroughout(x.shard, x.runner, x.epoch, x.start, x.end) {
			rep.outsideLock = append(rep.outsideLock, fmt.Sprintf("task %s on %s (epoch %d) [%s, %s]", x.taskID, x.runner, x.epoch, x.start.Format("05.000"), x.end.Format("05.000")))
		}
	}
	overlap := func(key string, group map[string][]auditExec) {
		for k, xs := range group {
			sort.Slice(xs, func(i, j int) bool { return xs[i].start.Before(xs[j].start) })
			for i := 1; i < len(xs); i++ {
				prev, cur := xs[i-1], xs[i]
				if cur.start.Before(prev.end) && !(prev.cancelled && !prev.end.After(cur.start)) {
					rep.overlaps = append(rep.overlaps, fmt.Sprintf("%s %s: %s on %s [%s, %s] and %s on %s from %s",
						key, k, prev.taskID, prev.runner, prev.start.Format("05.000"), prev.end.Format("05.000"), cur.taskID, cur.runner, cur.start.Format("05.000")))
				}
			}
		}
	}
	byTask, byEntity := map[string][]auditExec{}, map[string][]auditExec{}
	for _, x := range execs {
		byTask[x.taskID] = append(byTask[x.taskID], x)
		if x.entity != "" {
			byEntity[x.entity] = append(byEntity[x.entity], x)
		}
	}
	overlap("task", byTask)
	overlap("entity", byEntity)

	client := c.taskClient()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, ref := range refs {
		tk, err := client.Get(ctx, ref)
		if err != nil {
			t.Fatalf("audit: get %s: %v", ref, err)
		}
		if !tk.Status.IsTerminal() {
			rep.notTerminal = append(rep.notTerminal, fmt.Sprintf("%s %s attempt %d", ref, tk.Status, tk.Attempt))
			continue
		}
		completions := 0
		for _, h := range tk.History {
			if h.Event == task.EventCompleted {
				completions++
			}
		}
		if completions > 1 {
			rep.completedTwice = append(rep.completedTwice, ref)
		}
		switch tk.Status {
		case task.Completed:
			rep.completed++
		case task.Failed:
			rep.failed++
		}
	}
	return rep
}

func (r auditReport) check(t testing.TB) {
	t.Helper()
	for name, list := range map[string][]string{
		"(a) executions outside the runner's lock tenure": r.outsideLock,
		"(b) overlapping executions":                      r.overlaps,
		"(c) tasks that never reached a terminal state":   r.notTerminal,
		"(d) tasks completed twice":                       r.completedTwice,
	} {
		if len(list) > 0 {
			t.Errorf("%s: %d, e.g. %v", name, len(list), list[:min(len(list), 5)])
		}
	}
}
