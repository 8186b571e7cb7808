package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/internal/testenv/poll"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// auditExec is one execution of a task as the external recorder saw it:
// Cancelled when the runner dropped the request before the work ended,
// Done when the work ended and its answer was written.
type auditExec = harness.Execution

// recorder is the audit's HTTP task handler (runners call it through
// their http: handler), logging each execution with one clock.
type recorder struct {
	*harness.Recorder
	srv *http.Server
	ln  net.Listener
}

func newRecorder(t testing.TB) *recorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{Recorder: harness.NewRecorder(), ln: ln}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve)}
	go r.srv.Serve(ln)
	t.Cleanup(func() { r.srv.Close() })
	return r
}

func (r *recorder) URL() string { return "http://" + r.ln.Addr().String() + "/task" }

// serve runs a task: it works for the input's ms (or until the runner
// cancels the request) and records the execution. An input's retry_ms,
// when set, is how long the attempts after the first work instead: a test
// whose first attempts must be long (to still run when they are taken
// over) need not wait as long for the attempts that take them over.
func (r *recorder) serve(w http.ResponseWriter, req *http.Request) {
	var t task.Task
	if err := json.NewDecoder(req.Body).Decode(&t); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	run := auditExec{TaskID: t.ID, Entity: t.Entity, Shard: t.Shard, Attempt: t.Attempt}
	if t.Claim != nil {
		run.Runner, run.Epoch = t.Claim.RunnerID, t.Claim.Epoch
	} else {
		// An entity call, run as a task built from the message, has no
		// claim: the runner says who it is in the URL it was given
		// (callRecorderURL).
		run.Runner = req.URL.Query().Get("runner")
	}
	x := r.Begin(run)
	var in struct {
		MS      int `json:"ms"`
		RetryMS int `json:"retry_ms"`
	}
	json.Unmarshal(t.Input, &in)
	if t.Attempt > 1 && in.RetryMS > 0 {
		in.MS = in.RetryMS
	}
	select {
	case <-time.After(time.Duration(in.MS) * time.Millisecond):
		r.Finish(x, nil)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ran_on":%q}`, run.Runner)
	case <-req.Context().Done():
		r.Cancelled(x)
		r.Finish(x, context.Cause(req.Context()))
	}
}

// all returns the executions so far, those still running ending now
// (unfinished).
func (r *recorder) all() []auditExec { return r.AllEndingNow() }

// watchLocks follows shards/ with a store of its own, directly on an etcd
// member (no runner proxy). Its watch re-lists after a break (the loss of
// etcd's leader breaks it) with a short back-off, so that it catches up as
// soon as etcd answers again.
func watchLocks(ctx context.Context, c *cluster) *harness.LockTimeline {
	store, err := c.Store(ctx, "", etcd.WithRetryBackoff(20*time.Millisecond), etcd.WithRequestTimeout(500*time.Millisecond))
	if err != nil {
		c.t.Fatal(err)
	}
	return harness.WatchLocks(ctx, store)
}

// auditReport is what the audit found.
type auditReport struct {
	executions, cancelled int
	outsideLock           []string // (a) executions while the runner did not hold the shard
	overlaps              []string // (b) overlapping executions of a task or an entity
	lost                  []string // (c) accepted tasks missing or not terminal
	completedTwice        []string // (d) tasks whose history completes more than once
	// historyAnomalies are histories at odds with a single completion: a
	// completed task without a completed event, events after the
	// completion, another final status after a completed event.
	historyAnomalies []string
	// unrecordedCompletions are completions (runner, attempt) for which
	// the recorder saw no run of that attempt on that runner finish.
	unrecordedCompletions []string
	// phantoms are submits resolved as not accepted whose task later
	// exists or was run.
	phantoms []string

	completed, failed, cancelledTasks int
	truncatedHistories                int // tasks whose history dropped older entries

	// placedByHistory counts the executions whose tenure the live lock
	// watch never showed, judged by etcd's history instead (Judge).
	placedByHistory int
	// outsideLockRuns are the executions of outsideLock, in its order.
	outsideLockRuns []auditExec
	// lockHistory is etcd's own history of the locks the executions were
	// judged with; nil if none (no executions, coordination on S3, or
	// unreadable).
	lockHistory *harness.LockHistory
}

// auditReaders is how many task objects the audit reads at a time.
const auditReaders = 16

// readTasks reads the tasks refs in parallel: the task, or the error.
func readTasks(ctx context.Context, client *task.Client, refs []string) ([]*task.Task, []error) {
	tasks, errs := make([]*task.Task, len(refs)), make([]error, len(refs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range auditReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				for try := 0; ; try++ {
					rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					tasks[i], errs[i] = client.Get(rctx, refs[i])
					cancel()
					if errs[i] == nil || !storage.IsRetryable(errs[i]) || try == 5 || ctx.Err() != nil {
						break
					}
					time.Sleep(100 * time.Millisecond) // back off before reading again
				}
			}
		}()
	}
	for i := range refs {
		next <- i
	}
	close(next)
	wg.Wait()
	return tasks, errs
}

// waitTerminal waits until every task of refs is terminal, or within
// passes; it returns those that are not (or cannot be read).
func waitTerminal(ctx context.Context, client *task.Client, refs []string, within time.Duration) []string {
	pending := refs
	// Read every 500 ms: each read is one GET per pending task.
	poll.Until(ctx, within, 500*time.Millisecond, func() (bool, string, error) {
		tasks, _ := readTasks(ctx, client, pending)
		var still []string
		for i, tk := range tasks {
			if tk == nil || !tk.Status.IsTerminal() {
				still = append(still, pending[i])
			}
		}
		pending = still
		return len(pending) == 0, "", nil
	})
	return pending
}

// audit checks the properties from outside: the recorder's executions
// (its own clock), the lock timeline from an etcd watch (nil: not
// checked), and every task object read back from S3 — its final status
// and its whole history. accepted are the tasks that must exist and be
// terminal; rejected the submits resolved as not accepted, which must
// neither exist nor have run.
func audit(t testing.TB, client *task.Client, execs []auditExec, locks *harness.LockTimeline, accepted, rejected []string) auditReport {
	return auditLag(t, client, execs, locks, accepted, rejected, 0)
}

// auditLag is audit with lag: how long after its runner abandoned it the
// recorder may notice that a cancelled execution ended. An execution the
// runner cancels ends for the runner when its handler returns; the
// recorder sees it end only when it notices the aborted request, so the
// entity's next run, started by the runner at once, can reach the
// recorder just before that. Tasks leave S3 round trips between two runs
// of an entity and need no lag; calls run back to back.
func auditLag(t testing.TB, client *task.Client, execs []auditExec, locks *harness.LockTimeline, accepted, rejected []string, lag time.Duration) auditReport {
	var rep auditReport
	rep.executions = len(execs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if locks != nil && len(execs) > 0 {
		// etcd's own history of the locks, read once every execution has
		// ended (those still running were ended when execs was taken): it
		// places the tenures the live watch missed (see Judge).
		hctx, hcancel := context.WithTimeout(ctx, 2*time.Minute)
		hist, err := locks.ReadHistory(hctx)
		hcancel()
		if err != nil {
			t.Logf("audit: %v; executions are judged by the live lock watch alone", err)
		}
		rep.lockHistory = hist
	}
	for _, x := range execs {
		if x.Cancelled() {
			rep.cancelled++
		}
		if locks == nil {
			continue
		}
		v := locks.Judge(rep.lockHistory, x.Shard, x.Runner, x.Epoch, x.Start, x.End)
		if v.ByHistory {
			rep.placedByHistory++
		}
		if !v.Held {
			rep.outsideLock = append(rep.outsideLock, fmt.Sprintf("task %s on %s (epoch %d) in %s [%s, %s]: %s; lock changes: %s",
				x.TaskID, x.Runner, x.Epoch, x.Shard, x.Start.Format("15:04:05.000"), x.End.Format("15:04:05.000"), v.Why,
				locks.Around(x.Shard, x.Start, x.End, 3*time.Second)))
			rep.outsideLockRuns = append(rep.outsideLockRuns, x)
		}
	}
	overlap := func(key string, group map[string][]auditExec) {
		for k, xs := range group {
			sort.Slice(xs, func(i, j int) bool { return xs[i].Start.Before(xs[j].Start) })
			for i := 1; i < len(xs); i++ {
				prev, cur := xs[i-1], xs[i]
				if cur.Start.Before(prev.End) && !(prev.Cancelled() && !prev.End.After(cur.Start.Add(lag))) {
					rep.overlaps = append(rep.overlaps, fmt.Sprintf("%s %s: %s on %s [%s, %s] and %s on %s from %s",
						key, k, prev.TaskID, prev.Runner, prev.Start.Format("05.000"), prev.End.Format("05.000"), cur.TaskID, cur.Runner, cur.Start.Format("05.000")))
				}
			}
		}
	}
	byTask, byEntity := map[string][]auditExec{}, map[string][]auditExec{}
	for _, x := range execs {
		byTask[x.TaskID] = append(byTask[x.TaskID], x)
		if x.Entity != "" {
			byEntity[x.Entity] = append(byEntity[x.Entity], x)
		}
	}
	overlap("task", byTask)
	overlap("entity", byEntity)

	tasks, errs := readTasks(ctx, client, accepted)
	for i, ref := range accepted {
		tk, err := tasks[i], errs[i]
		switch {
		case errors.Is(err, task.ErrNotFound):
			rep.lost = append(rep.lost, ref+" (no task object)")
			continue
		case err != nil:
			t.Fatalf("audit: get %s: %v", ref, err)
		case !tk.Status.IsTerminal():
			rep.lost = append(rep.lost, fmt.Sprintf("%s %s attempt %d", ref, tk.Status, tk.Attempt))
			if len(rep.lost) <= 3 {
				// Enough of the first ones to tell a stuck shard from a
				// stuck entity from a task waiting on its own schedule.
				t.Logf("audit: not terminal: %s", lostDetail(tk))
			}
		}
		if tk.HistoryDropped > 0 {
			rep.truncatedHistories++
		}
		rep.checkHistory(ref, tk, byTask[tk.ID], execs != nil)
		switch tk.Status {
		case task.Completed:
			rep.completed++
		case task.Failed:
			rep.failed++
		case task.Cancelled:
			rep.cancelledTasks++
		}
	}
	_, rejectedErrs := readTasks(ctx, client, rejected)
	for i, ref := range rejected {
		if err := rejectedErrs[i]; !errors.Is(err, task.ErrNotFound) {
			rep.phantoms = append(rep.phantoms, fmt.Sprintf("%s: resolved as not accepted, now reads %v", ref, err))
		}
		_, id, _ := task.ParseRef(ref)
		if n := len(byTask[id]); n > 0 {
			rep.phantoms = append(rep.phantoms, fmt.Sprintf("%s: resolved as not accepted, ran %d times", ref, n))
		}
	}
	return rep
}

// lostDetail describes a task that is not terminal: its entity, when it
// is due, its claim and its last events.
func lostDetail(tk *task.Task) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s entity %q status %s attempt %d created %s available %s", tk.Ref(), tk.Entity, tk.Status, tk.Attempt,
		tk.CreatedAt.Format("15:04:05.000"), tk.AvailableAt.Format("15:04:05.000"))
	if c := tk.Claim; c != nil {
		fmt.Fprintf(&b, " claim %s epoch %d enforced %v lease until %s", c.RunnerID, c.Epoch, c.Enforced, c.LeaseExpiresAt.Format("15:04:05.000"))
	}
	for _, h := range tk.History[max(0, len(tk.History)-4):] {
		fmt.Fprintf(&b, "; %s %s", h.At.Format("15:04:05.000"), h.Event)
		if h.Runner != "" {
			fmt.Fprintf(&b, " by %s", h.Runner)
		}
		if h.Detail != "" {
			fmt.Fprintf(&b, " (%s)", h.Detail)
		}
	}
	return b.String()
}

// checkHistory reads a task's history: exactly one completed event for a
// completed task, as its last event, made by a run the recorder saw
// finish (when recorded is set); none for a task that ended otherwise.
func (rep *auditReport) checkHistory(ref string, tk *task.Task, runs []auditExec, recorded bool) {
	var completions []int
	for i, h := range tk.History {
		if h.Event == task.EventCompleted {
			completions = append(completions, i)
		}
	}
	if len(completions) > 1 {
		rep.completedTwice = append(rep.completedTwice, fmt.Sprintf("%s: %d completed events", ref, len(completions)))
	}
	switch {
	case tk.Status == task.Completed && len(completions) == 0:
		rep.historyAnomalies = append(rep.historyAnomalies, ref+": completed, but no completed event in its history")
		return
	case tk.Status != task.Completed && len(completions) > 0:
		rep.historyAnomalies = append(rep.historyAnomalies, fmt.Sprintf("%s: %s after a completed event", ref, tk.Status))
		return
	case len(completions) == 0:
		return
	}
	last := completions[len(completions)-1]
	if last != len(tk.History)-1 {
		var after []string
		for _, h := range tk.History[last+1:] {
			after = append(after, h.Event)
		}
		rep.historyAnomalies = append(rep.historyAnomalies, fmt.Sprintf("%s: events after the completion: %v", ref, after))
	}
	if !recorded {
		return
	}
	ev := tk.History[completions[0]]
	for _, x := range runs {
		if x.Runner == ev.Runner && x.Attempt == ev.Attempt && x.Done() {
			return
		}
	}
	rep.unrecordedCompletions = append(rep.unrecordedCompletions,
		fmt.Sprintf("%s: completed by %s attempt %d, but the recorder saw no such run finish (%d runs)", ref, ev.Runner, ev.Attempt, len(runs)))
}

// explainRunner is how long before and after a flagged execution
// explainOutsideLock prints its runner's log.
const explainRunner = 10 * time.Second

// explainOutsideLock prints, for each execution flagged outside its lock,
// what tells a short tenure the live watch missed from work done after the
// lock was gone: the shard's whole live lock timeline, etcd's history of
// its lock key, and the runner's log (attachments and detachments
// included, when the cluster logs its runners: logRunnersTo) from
// explainRunner before the execution to explainRunner after it.
func (r auditReport) explainOutsideLock(t testing.TB, locks *harness.LockTimeline, c *cluster) {
	for i, x := range r.outsideLockRuns {
		var b strings.Builder
		fmt.Fprintf(&b, "audit: outside the lock: %s\nlive lock timeline of %s (arrival, revision, holder@epoch):\n%s\n",
			r.outsideLock[i], x.Shard, locks.Timeline(x.Shard))
		if r.lockHistory != nil {
			fmt.Fprintf(&b, "etcd's history of %s:\n%s\n", x.Shard, r.lockHistory.Describe(x.Shard))
		} else {
			b.WriteString("etcd's history: not read\n")
		}
		from, to := x.Start.Add(-explainRunner), x.End.Add(explainRunner)
		fmt.Fprintf(&b, "log of %s from %s to %s:\n", x.Runner, from.Format("15:04:05.000"), to.Format("15:04:05.000"))
		switch rp := c.runners.Get(x.Runner); {
		case rp == nil || rp.logPath == "":
			b.WriteString("(not recorded)")
		default:
			lines, err := runnerLogLines(rp.logPath, from, to)
			b.WriteString(strings.Join(lines, "\n"))
			if err != nil {
				fmt.Fprintf(&b, "\n(%v)", err)
			}
		}
		t.Log(b.String())
	}
}

func (r auditReport) check(t testing.TB) {
	t.Helper()
	for _, c := range []struct {
		name string
		list []string
	}{
		{"(a) executions outside the runner's lock tenure", r.outsideLock},
		{"(b) overlapping executions", r.overlaps},
		{"(c) accepted tasks lost (missing or never terminal)", r.lost},
		{"(d) tasks completed twice", r.completedTwice},
		{"(e) histories at odds with one completion", r.historyAnomalies},
		{"(f) completions without a recorded run", r.unrecordedCompletions},
		{"(g) submits resolved as not accepted that exist or ran", r.phantoms},
	} {
		if len(c.list) > 0 {
			t.Errorf("%s: %d, e.g. %v", c.name, len(c.list), c.list[:min(len(c.list), 5)])
		}
	}
}
