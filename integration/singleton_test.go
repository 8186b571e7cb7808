package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/storage"
)

// The proof of singletons with `tenure run` processes: every
// runner offers the singleton "leader" as an http: singleton pointed at a
// recorder in the test process, which sees each run as an open request,
// from outside: its start when the request arrives, its end when the
// connection closes. Across a SIGKILL of the holder, a SIGTERM drain of
// the next one and a partition of the third from etcd, no two runs are
// ever open at once, and after the SIGKILL etcd revokes the holder's lease
// within its TTL and the successor starts the singleton once the watches
// have moved its shard (the bounds of bounds_test.go; the log has the
// figures).

// singletonRun is one run of a singleton as the recorder saw it.
type singletonRun struct {
	runner     string
	start, end time.Time // end zero while open
}

// singletonRecorder is the endpoint of the runners' http: singletons: it
// holds each request open until its connection closes, and notes every
// start while another run is open.
type singletonRecorder struct {
	srv *http.Server
	ln  net.Listener

	mu         sync.Mutex
	runs       []singletonRun
	open       map[int]bool // indexes into runs
	violations []string     // starts while another run was open
	bad        []string     // requests that do not name the singleton or the runner
}

func newSingletonRecorder(t testing.TB) *singletonRecorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &singletonRecorder{ln: ln, open: map[int]bool{}}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve)}
	go r.srv.Serve(ln)
	t.Cleanup(func() { r.srv.Close() })
	return r
}

// URL is runner id's singleton endpoint: the recorder knows the runner
// from it, whatever the runner says about itself.
func (r *singletonRecorder) URL(id string) string {
	return "http://" + r.ln.Addr().String() + "/leader?runner=" + id
}

func (r *singletonRecorder) serve(w http.ResponseWriter, req *http.Request) {
	var body struct{ Singleton, Runner string }
	// The server sees the client go away only once the body is read.
	if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := req.URL.Query().Get("runner")
	r.mu.Lock()
	now := time.Now()
	for i := range r.open {
		r.violations = append(r.violations, fmt.Sprintf("%s started at %s while %s's run (since %s) was open",
			id, now.Format("15:04:05.000000"), r.runs[i].runner, r.runs[i].start.Format("15:04:05.000000")))
	}
	// The runner names itself when it knows its id (RegisterSingletonsWith).
	if body.Singleton != "leader" || body.Runner != "" && body.Runner != id {
		r.bad = append(r.bad, fmt.Sprintf("%s sent %+v", id, body))
	}
	n := len(r.runs)
	r.runs = append(r.runs, singletonRun{runner: id, start: now})
	r.open[n] = true
	r.mu.Unlock()

	<-req.Context().Done()

	r.mu.Lock()
	r.runs[n].end = time.Now()
	delete(r.open, n)
	r.mu.Unlock()
}

// current returns the open run, if exactly one is.
func (r *singletonRecorder) current() (singletonRun, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.open) != 1 {
		return singletonRun{}, false
	}
	for i := range r.open {
		return r.runs[i], true
	}
	return singletonRun{}, false
}

// snapshot returns the runs so far (in start order) and the violations.
func (r *singletonRecorder) snapshot() ([]singletonRun, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs), slices.Clone(r.violations)
}

// badRequests returns the requests that named another singleton or runner.
func (r *singletonRecorder) badRequests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.bad)
}

// awaitHolder waits for an open run on a runner other than not, started
// after since.
func (r *singletonRecorder) awaitHolder(t *testing.T, not string, since time.Time, within time.Duration) singletonRun {
	t.Helper()
	var run singletonRun
	testenv.WaitFor(t, "a run of the singleton on a runner other than "+not, within, func() bool {
		var ok bool
		run, ok = r.current()
		return ok && run.runner != not && run.start.After(since)
	})
	return run
}

// endOf returns the end of run (when the recorder saw its connection
// close), waiting for it.
func (r *singletonRecorder) endOf(t *testing.T, run singletonRun, within time.Duration) time.Time {
	t.Helper()
	var end time.Time
	testenv.WaitFor(t, run.runner+"'s run to end", within, func() bool {
		runs, _ := r.snapshot()
		for _, x := range runs {
			if x.runner == run.runner && x.start.Equal(run.start) && !x.end.IsZero() {
				end = x.end
				return true
			}
		}
		return false
	})
	return end
}

// statusSingletons reads `tenure status --json`: singleton type → the
// runner reporting it running.
func statusSingletons(t *testing.T, c *cluster) map[string]string {
	t.Helper()
	var rep struct {
		Singletons []struct {
			Type, Runner string
			Running      bool
		}
	}
	out := tenure(t, "--config", c.cfgPath, "status", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("tenure status --json: %v: %s", err, out)
	}
	m := map[string]string{}
	for _, s := range rep.Singletons {
		if s.Running {
			m[s.Type] = s.Runner
		}
	}
	return m
}

// awaitStatus waits until `tenure status --json` names holder as running
// the leader singleton.
func awaitStatus(t *testing.T, c *cluster, holder string) {
	t.Helper()
	testenv.WaitFor(t, "tenure status naming "+holder+" as the leader's runner", 20*time.Second, func() bool {
		return statusSingletons(t, c)["leader"] == holder
	})
}

// singletonLease is the runner lease of these runners (fastRunner's).
const singletonLease = 3 * time.Second

func TestSingletonAcrossKillDrainAndPartition(t *testing.T) {
	rec := newSingletonRecorder(t)
	c := newCluster(t)
	ids := []string{"l1", "l2", "l3"}
	var rs []*runnerProc
	for _, id := range ids {
		args := append(slices.Concat(fastRunner, watchOnlyRunner), "--singleton", "leader=http:"+rec.URL(id))
		rs = append(rs, c.run(id, args...))
	}
	byID := func(id string) *runnerProc { return rs[slices.Index(ids, id)] }
	c.waitAllOwned(ids, 60*time.Second)
	c.waitSettled(rs, 1, 30*time.Second)
	locks := lockWatch(t, c)
	first := rec.awaitHolder(t, "", time.Time{}, 20*time.Second)
	awaitStatus(t, c, first.runner)
	t.Logf("leader runs on %s", first.runner)

	// SIGKILL of the holder (the kill closes its run's connection): etcd
	// revokes its lease within revokeBound of the kill, and the successor
	// starts within harness.WatchBound of that.
	shard := entity.SingletonShard(storage.DefaultGroup, devShards, "leader")
	victim := byID(first.runner)
	killed := time.Now()
	victim.signal(t, syscall.SIGKILL)
	victim.wait(t, 10*time.Second)
	next := rec.awaitHolder(t, first.runner, killed, harness.RevokeBound(singletonLease)+harness.WatchBound)
	killGap := next.start.Sub(rec.endOf(t, first, 5*time.Second))
	revoked, _ := locks.RevokedAt(first.runner, []storage.ShardID{shard}, killed)
	t.Logf("SIGKILL of %s: leader on %s %s after the killed run ended (%s after the kill; lease TTL %s, revoked %s after the kill)",
		first.runner, next.runner, killGap.Round(time.Millisecond), next.start.Sub(killed).Round(time.Millisecond), singletonLease,
		revoked.Sub(killed).Round(time.Millisecond))
	switch {
	case revoked.IsZero():
		t.Errorf("the lock watch saw no release of %s's lock of %s after the kill", first.runner, shard)
	case revoked.Sub(killed) > harness.RevokeBound(singletonLease):
		t.Errorf("%s's lease revoked %s after the kill, want within %s (its TTL %s, etcd's check, the watch)",
			first.runner, revoked.Sub(killed), harness.RevokeBound(singletonLease), singletonLease)
	case next.start.Sub(revoked) > harness.WatchBound:
		t.Errorf("the singleton started on %s %s after %s's lease was revoked, want within %s (moved by the watches)",
			next.runner, next.start.Sub(revoked), first.runner, harness.WatchBound)
	}
	awaitStatus(t, c, next.runner)

	// The killed runner comes back (the rebalance may move the leader to
	// it: a planned handoff, audited like the rest).
	c.restart(victim)
	c.waitSettled(rs, 1, 30*time.Second)
	holder := rec.awaitHolder(t, "", time.Time{}, 20*time.Second)

	// SIGTERM drain of the holder: its run ends before the successor's
	// starts, and it exits 0.
	victim = byID(holder.runner)
	drained := time.Now()
	victim.signal(t, syscall.SIGTERM)
	next = rec.awaitHolder(t, holder.runner, drained, 20*time.Second)
	drainGap := next.start.Sub(rec.endOf(t, holder, 5*time.Second))
	t.Logf("SIGTERM of %s: leader on %s %s after the drained run ended (%s after the signal)",
		holder.runner, next.runner, drainGap.Round(time.Millisecond), next.start.Sub(drained).Round(time.Millisecond))
	if code := victim.wait(t, 20*time.Second); code != 0 {
		t.Errorf("%s exited %d after SIGTERM, want 0", holder.runner, code)
	}
	awaitStatus(t, c, next.runner)

	// Partition of the holder from etcd: it stops the run once detached,
	// before its lease can expire and a successor start; then heal.
	var live []*runnerProc
	for _, r := range rs {
		if !r.exited() {
			live = append(live, r)
		}
	}
	holder = next
	victim = byID(holder.runner)
	victim.proxy.SetMode(testenv.Blackhole)
	cut := time.Now()
	next = rec.awaitHolder(t, holder.runner, cut, 30*time.Second)
	cutEnd := rec.endOf(t, holder, time.Second)
	partitionGap := next.start.Sub(cutEnd)
	t.Logf("partition of %s: its run ended %s after the cut, leader on %s %s after that (%s after the cut)",
		holder.runner, cutEnd.Sub(cut).Round(time.Millisecond), next.runner, partitionGap.Round(time.Millisecond),
		next.start.Sub(cut).Round(time.Millisecond))
	victim.proxy.SetMode(testenv.Pass)
	c.waitSettled(live, 1, 30*time.Second)
	final := rec.awaitHolder(t, "", time.Time{}, 20*time.Second)
	awaitStatus(t, c, final.runner)

	runs, violations := rec.snapshot()
	var lines []string
	for _, x := range runs {
		end := "open"
		if !x.end.IsZero() {
			end = x.end.Format("05.000")
		}
		lines = append(lines, fmt.Sprintf("%s %s–%s", x.runner, x.start.Format("05.000"), end))
	}
	t.Logf("%d runs: %s", len(runs), strings.Join(lines, ", "))
	for _, v := range violations {
		t.Errorf("overlap: %s", v)
	}
	for _, b := range rec.badRequests() {
		t.Errorf("bad request: %s", b)
	}
	// The same from the whole record: each run starts after the one
	// before it ended.
	slices.SortFunc(runs, func(a, b singletonRun) int { return a.start.Compare(b.start) })
	for i := 1; i < len(runs); i++ {
		if prev := runs[i-1]; prev.end.IsZero() || runs[i].start.Before(prev.end) {
			t.Errorf("%s's run started at %s before %s's run ended (%v)", runs[i].runner,
				runs[i].start.Format("15:04:05.000000"), prev.runner, prev.end)
		}
	}
}
